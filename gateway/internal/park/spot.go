//go:build linux

package park

import (
	"sync"

	"github.com/termgate/termgate/sandbox/fdio"
)

// Spot parks one socket's descriptor in the process's waiter for idle
// descriptors. Its lock orders a Park against Close, so that the socket
// is never closed while the waiter holds its descriptor: a closed
// descriptor leaves the waiter's epoll unseen, and its number may be
// another's by then. A nil Spot never parks.
type Spot struct {
	fd      int
	mu      sync.Mutex
	resume  func() // what runs when the parked socket is readable; nil unless parked
	closing bool   // Close began: park no more
}

// NewSpot returns the Spot of the socket's descriptor fd; a negative fd
// never parks.
func NewSpot(fd int) *Spot { return &Spot{fd: fd} }

// FD is the socket's descriptor the Spot parks.
func (s *Spot) FD() int { return s.fd }

// Park gives the socket to the waiter, which calls resume on a goroutine
// of its own once the client sends something or hangs up, or Close does
// (it may have already when Park returns). False, with nothing parked,
// when the socket is closing or the waiter cannot take it: the caller
// waits on in the poller.
func (s *Spot) Park(resume func()) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing || s.fd < 0 {
		return false
	}
	s.resume = resume
	if !fdio.WhenReadable(s.fd, s.unpark) {
		s.resume = nil
		return false
	}
	return true
}

// Parked reports whether the socket waits in the waiter.
func (s *Spot) Parked() bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.resume != nil
}

// unpark runs the parked connection again: the waiter found its socket
// readable.
func (s *Spot) unpark() {
	s.mu.Lock()
	resume := s.resume
	s.resume = nil
	s.mu.Unlock()
	if resume != nil {
		resume()
	}
}

// Close takes a parked socket back from the waiter before the caller
// closes it, and runs the connection again, which finds it closed. No
// Park succeeds after it.
func (s *Spot) Close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.closing = true
	var resume func()
	if s.resume != nil && fdio.StopWaiting(s.fd) {
		resume, s.resume = s.resume, nil
	}
	s.mu.Unlock()
	if resume != nil {
		go resume()
	}
}
