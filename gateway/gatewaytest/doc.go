// Package gatewaytest holds what tests of the gateway, its clients and the
// command line share: a TCP proxy that cuts connections at random points,
// so resume is exercised over real sockets. Their polling loop is
// sandboxtest.Eventually.
//
// It is for tests only and imports nothing of termgate's.
package gatewaytest
