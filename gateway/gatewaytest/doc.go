// Package gatewaytest holds what tests of the gateway, its clients and the
// command line share: a TCP proxy that cuts connections at random points,
// so resume is exercised over real sockets. Their polling loop is
// sandboxtest.Eventually.
//
// It also holds Scripted, a WebSocket server a test plays step by step, so
// clients are tested against exact protocol exchanges, and AuditRecords, a
// reader of an audit trail's files for tests of what it records.
//
// It is for tests only and imports nothing of termgate's but gateway/wire.
package gatewaytest
