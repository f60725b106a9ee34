package client

import "time"

// SetAckDelay sets the ack timer's delay until the returned func restores
// it. Not for parallel tests.
func SetAckDelay(d time.Duration) (restore func()) {
	old := ackDelay
	ackDelay = d
	return func() { ackDelay = old }
}

// WSURL is wsURL.
var WSURL = wsURL

// SetOpenTimeout sets how long a reconnect's dial and handshake may take.
func SetOpenTimeout(d time.Duration) (restore func()) {
	old := openTimeout
	openTimeout = d
	return func() { openTimeout = old }
}
