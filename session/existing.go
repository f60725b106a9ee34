package session

import (
	"fmt"
)

// Existing answers whether owner's execution id exists as spec would
// make it, without ever creating one: its Info when it does, an error
// wrapping ErrConflict when id names an execution of another spec, and
// ErrNotFound or ErrGone as Get. spec is normalized and fingerprinted as
// Start does, so Existing and Start agree on what is equal. A keyed start
// on one node of several asks each candidate node this before any
// creates the execution.
//
// An execution whose first start is still launching is waited for; one
// whose launch was refused was never made (ErrNotFound).
func (s *Supervisor) Existing(owner, id string, spec Spec) (Info, error) {
	if err := checkID(id); err != nil {
		return Info{}, err
	}
	spec, err := s.normalize(spec)
	if err != nil {
		return Info{}, err
	}
	fp, err := fingerprintOf(spec)
	if err != nil {
		return Info{}, err
	}
	e, err := s.lookup(owner, id)
	if err != nil {
		return Info{}, err
	}
	if e.fingerprint != fp {
		return Info{}, fmt.Errorf("%w: %s", ErrConflict, id)
	}
	<-e.launched // a launch ends: the sandbox's start is bounded
	if e.launchErr != nil {
		return Info{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return e.info(), nil
}
