// Package cluster holds what lets several termgate nodes serve one set of
// clients: the node's identity, the signed hop between nodes, the peer
// list, rendezvous ranking and the HTTP transport to peers. It decides
// nothing about requests; the gateway's router does, with these parts.
//
// # Design
//
// There is no directory, consensus or cluster manager. The owner of an
// execution is named in its ID ("termgate-1.q7bazk~build-42", see
// session/execid), so any node can tell where an execution lives from the
// ID alone and forward the request there. Membership and routing come from
// the engines users already run: a static peer list (NewStatic), or the
// SRV records of a Kubernetes headless Service (NewDNS), whose StatefulSet
// gives pods stable names (termgate-0, termgate-1, ...).
//
// Identity. A node's name is given (--node); its epoch is random and kept
// in the state directory's node.json (LoadIdentity). The epoch changes only
// when the state is lost, so an ID naming this node with another epoch is
// an execution that is gone, never one that is merely not found. A state
// directory made by another node is refused: it is a volume mounted on the
// wrong pod.
//
// Hops. A node that forwards a request (the front) adds a Termgate-Hop
// header signed with HMAC-SHA256 under a secret all nodes share
// (Signer.Sign); the owner checks it (Signer.Verify): the signature with
// any of the configured secrets (the first signs, all verify, so a secret
// rotates by rolling restart), a time within HopWindow of the owner's
// clock, and that the hop is addressed to the owner itself. The hop
// carries no authority: the client's own token travels with the request
// and the owner verifies it again. What the hop vouches for is the
// client's address and that routing already happened, so a request with a
// valid hop is always served locally, which bounds forwarding to one hop
// and rules out loops. There is no nonce cache: a replay within the window
// repeats the same method and URI to the same node and still needs the
// client's valid token. The hop's confidentiality is the network's (https
// peers or a network policy).
//
// Membership. A Membership knows this node's name, every member's base
// URL and the sorted member list. With DNS, a node's URL is built from its
// name (scheme://NODE.DOMAIN:PORT) without a lookup, so an ID routes even
// before the first refresh; the member list is refreshed by Run, a name
// stays a member for a grace period after it was last seen (so a pod that
// restarts keeps its rank), and a failed lookup keeps the last list.
//
// Placement. Rank orders members for a tenant's key by rendezvous
// (highest random weight) hashing: every node computes the same order
// from the same member list, and adding or removing a node moves only the
// keys whose top candidates change.
//
// Transport. NewTransport dials peers with a dial timeout and never
// through an environment proxy; WithHeaderTimeout bounds the wait for
// response headers (a frozen peer accepts and never answers), and
// ExtendHeaderTimeout lengthens that bound for one request, such as a long
// poll, without bounding the body that follows. PeerFailed tells the
// peer's own failures (no connection; no headers in time after the whole
// request was sent) from what a sender brings about (a body still being
// sent when the bound ran out, a request its caller ended): only the
// former may count against the peer's health, so no client can make a
// node look down to the others.
package cluster
