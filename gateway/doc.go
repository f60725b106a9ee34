// Package gateway serves executions to browser terminals, IDE extensions
// and tools: a WebSocket protocol (PROTOCOL.md) on /v1/connect and an HTTP
// API under /v1/executions, both behind bearer tokens.
//
// How the pieces join:
//
//   - A Server (server.go) holds the Config: a session.Supervisor that runs
//     and keeps executions, an auth.Authenticator that verifies tokens, and
//     the limits. Handler returns its routes; build it once and mount it.
//   - connect (server.go) checks the subprotocol, the token and the Origin,
//     then upgrades: each WebSocket is a conn (conn.go) with one read loop,
//     a heartbeat and an expiry timer, and no writer goroutine: whoever has
//     something to write writes, one at a time (flush).
//   - The read loop decodes each message with package wire and dispatches it
//     (handlers.go: start, attach, input, resize, signal, cancel, reauth).
//     Every answer and refusal is queued for the writing, with a stable
//     code from wire. Starts, input, and resizes and signals each draw on
//     a token bucket per subject (ratelimit.go); a flood of requests that
//     ask for no answer is refused with one error, not one each. The queue
//     is bounded in messages and, per connection and per token subject, in
//     bytes (controlq.go): a screen snapshot is encoded once, and one
//     larger than a message or beyond those bytes goes as the gap it
//     stands in for.
//   - An attached execution is a channel (channel.go) with no goroutine:
//     the ring's callback marks it ready, and whoever writes for the
//     connection reads the execution's replay ring through a
//     session.Subscription, one batch per turn, so a slow client sees a
//     gap instead of slowing the execution.
//   - The HTTP API (httpapi.go) does the same requests without a
//     connection, sharing the per-subject rate limits and connection budget.
//   - listener.go bounds connections per client (IPv4 /24, IPv6 /64) before
//     any handshake, and gives the ones without a request header yet a
//     budget of their own and a first-byte timeout (Listener.ConnState).
//
// The gateway is the only place that maps errors to HTTP statuses and close
// codes; it holds no process logic, which stays in session and sandbox.
// Clients need only package wire (gateway/client is the Go client).
package gateway
