// Package netredirect turns a network namespace with loopback only into
// one whose every outside connection reaches termgate: default routes
// through lo (Routes) and an nftables table (Rules) that redirects TCP,
// DNS and, with a relay, other UDP to listeners on the namespace's
// loopback and refuses everything else. It speaks netlink on sockets the caller opened in the
// namespace, from any thread: only socket(2) needs to run inside, and
// the caller does that (sandbox.NetNS). The listeners the rules send to
// read each connection's and datagram's original destination here too:
// ConnOriginalDst (SO_ORIGINAL_DST) and OriginalDst (conntrack, over
// ctnetlink).
//
// Without the routes the namespace has none to an outside address, so a
// connect fails with ENETUNREACH; without the rules a packet routed
// through lo to an outside address comes back in on lo, is not for this
// host, and is dropped, since the namespace forwards nothing and has no
// other link. Missing pieces therefore fail closed; the rules are what
// make the failure an answer (the proxy's refusal, a reset, EPERM)
// rather than a wait. A program in the namespace without CAP_NET_ADMIN
// there can change neither.
//
// The messages are written here, a few hundred bytes of fixed layout,
// rather than through an nftables library: github.com/google/nftables
// opens its own socket (entering the namespace itself through
// mdlayher/netlink) and cannot be handed one, and everything else it
// offers would be unused.
package netredirect
