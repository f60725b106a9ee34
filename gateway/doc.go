// Package gateway serves executions to browser terminals, IDE extensions
// and tools: a WebSocket protocol (PROTOCOL.md) on /v1/connect and an HTTP
// API under /v1/ (openapi.json describes it), both behind bearer tokens.
//
// How the pieces join:
//
//   - A Server (server.go) holds the Config: a session.Supervisor that runs
//     and keeps executions, an auth.Authenticator that verifies tokens, and
//     the limits. NewServer and Handler (handler.go) build it and its
//     routes; build it once and mount the one handler.
//   - connect (handler.go) checks the subprotocol, the token and the
//     Origin, then upgrades: each WebSocket is a conn (conn.go). A plain
//     TCP or unix socket is hijacked into an nbConn (nbconn.go, hijack.go)
//     whose writes never block, with small buffers.
//   - A conn has one read loop (readloop.go): it decodes each message with
//     package wire and dispatches it (handlers.go: start, attach, input,
//     resize, signal, cancel, reauth, ack). Every answer and refusal gets
//     a stable code from wire (codes.go holds the one table of errors to
//     codes and of codes to HTTP statuses). Starts, input, and resizes
//     and signals each draw on a token bucket per subject (ratelimit.go);
//     a flood of requests that ask for no answer is refused with one
//     error, not one each. A heartbeat and the token's expiry are timers
//     (heartbeat.go), not goroutines.
//   - A conn has no writer goroutine: its writer (writer.go) is written by
//     whoever has something to write, one goroutine at a time, in fair
//     rounds of control messages (bounded in messages and, per connection
//     and per token subject, in bytes: controlq.go), input-acks
//     (inputack.go), one turn of each ready channel and one relayed frame.
//   - An attached execution is a channel (channel.go) with no goroutine:
//     the ring's callback marks it ready, and the writer reads the
//     execution's replay ring through a session.Subscription, one batch
//     per turn.
//   - An idle connection gives its goroutine up: after parkAfter without a
//     message its socket is parked in the process's waiter for idle
//     descriptors (package gateway/internal/park, over sandbox/fdio) until
//     the client sends again.
//   - The HTTP API (httpapi.go, httpapi_routes.go) does the same requests
//     without a connection, sharing the per-subject rate limits and
//     connection budget, and serves recordings (recording.go).
//   - On a node of a cluster (Config.Cluster; the cluster_*.go files, over
//     package gateway/cluster), a router (cluster_route.go) places starts
//     and finds the node owning an execution; HTTP requests are forwarded
//     to it (cluster_http.go), and a connection's channels on other nodes'
//     executions go through its relay (cluster_relay.go): one upstream
//     WebSocket per owner node, frames copied both ways with only request
//     ids and channel numbers changed. On a single node a conn has no
//     relay.
//   - The audit trail (package gateway/audit) records who did what;
//     audit_events.go and audit_http.go say which request writes which
//     record, before the action takes effect.
//   - MetricsHandler (metrics.go) serves Prometheus metrics. Shutdown
//     waits for the attached channels' exits; Restart (shutdown.go) closes
//     every connection with 1012 at once, "reconnect and resume", while
//     the executions live on for the next server. release.go returns
//     closed connections' memory to the OS.
//   - network.go: a start's network and its scopes, the network request
//     and /v1/executions/{id}/network, the connections' audit records,
//     the network metrics and the policy digest that hops carry.
//   - forward.go: forward streams to ports programs listen on in their
//     sandboxes (session.Ports), a window of credit each way and a turn
//     of their own at the writer; ports_watch.go tells channels that
//     asked which ports their execution listens on; preview.go serves
//     browser previews of a port, path-based or host-based. A relay
//     carries the streams of other nodes' executions too; forward_pace.go
//     keeps a stream beside terminals from queueing ahead of their output.
//   - files.go: the files API on the tenant's workspace (sandbox/files,
//     as the tenant): files, listings, tar streams, resumable uploads,
//     and the same beside an execution, relayed to its node.
//   - agentexec.go: the agent exec (POST /v1/exec, /write), a start or
//     input and a wait for its output as text (internal/transcript), one
//     call; agentexec_ws.go serves the same as WebSocket requests, on
//     goroutines the connection owns, and relays them to the owner node's
//     HTTP API.
//   - listener.go bounds connections per client (IPv4 /24, IPv6 /64) before
//     any handshake, and gives the ones without a request header yet a
//     budget of their own and a first-byte timeout (Listener.ConnState).
//
// Output flow: the PTY reader never blocks on a client socket; it may wait
// for acknowledgements. Writes to a client go through the writer, which
// never waits on the ring's appending goroutine: a slow client makes its
// writer lag, and (flow live, or past the hold window) the ring evicts
// and the client later sees a gap. With flow hold (the default) the
// execution's output waits, within the hold window, for its acknowledging
// writers (session's flow.go), never for a socket.
//
// The gateway is the only place that maps errors to HTTP statuses and close
// codes; it holds no process logic, which stays in session and sandbox.
// Clients need only package wire (gateway/client is the Go client).
package gateway
