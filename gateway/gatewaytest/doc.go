// Package gatewaytest holds what tests of the gateway, its clients and the
// command line share: a TCP proxy that cuts connections at random points,
// so resume is exercised over real sockets, and Eventually, the one
// polling loop for conditions that come true at some point.
//
// It also holds Scripted, a WebSocket server a test plays step by step, so
// clients are tested against exact protocol exchanges.
//
// It is for tests only and imports nothing of termgate's but gateway/wire.
package gatewaytest
