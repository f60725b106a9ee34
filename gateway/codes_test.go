package gateway

import (
	"errors"
	"fmt"
	"slices"
	"syscall"
	"testing"

	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/sandbox"
	"github.com/termgate/termgate/session"
)

// TestSessionCodesAreWireCodes keeps the codes the supervisor's errors
// map to (errorCode) within the protocol's list: session names the
// errors, wire defines the codes, the gateway maps one to the other.
func TestSessionCodesAreWireCodes(t *testing.T) {
	t.Parallel()
	for _, err := range []error{
		session.ErrNotFound, session.ErrConflict, session.ErrCapacity, session.ErrInvalidID,
		session.ErrInvalidSpec, session.ErrNotRunning, session.ErrInputOffset, session.ErrInputFull,
		session.ErrNotPTY, session.ErrNoPipes, session.ErrSignal, session.ErrClosed,
		session.ErrAfter, session.ErrAck, session.ErrOutOfDescriptors, sandbox.ErrInvalidPolicy, sandbox.ErrUnenforceable, errors.New("other"),
	} {
		if code := errorCode(err); !slices.Contains(wire.Codes(), code) {
			t.Errorf("errorCode(%v) = %q, not a wire code", err, code)
		}
	}
	if code := errorCode(fmt.Errorf("gateway: open workspace root: %w", syscall.EMFILE)); code != wire.CodeCapacity {
		t.Errorf("an EMFILE outside a start is %q, not capacity", code)
	}
	for code := range apiStatus {
		if !slices.Contains(wire.Codes(), code) {
			t.Errorf("apiStatus has %q, not a wire code", code)
		}
	}
}

// TestLossCausesAreWireCauses: the causes the supervisor gives a gap are
// the ones the protocol names.
func TestLossCausesAreWireCauses(t *testing.T) {
	t.Parallel()
	pairs := [][2]string{
		{session.LossReadOnly, wire.LossReadOnly}, {session.LossLive, wire.LossLive},
		{session.LossHoldExpired, wire.LossHoldExpired}, {session.LossStopped, wire.LossStopped},
		{session.LossUnheld, wire.LossUnheld},
	}
	for _, p := range pairs {
		if p[0] != p[1] {
			t.Errorf("session cause %q, wire cause %q", p[0], p[1])
		}
	}
}
