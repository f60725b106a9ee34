package client

import (
	"errors"
	"testing"

	"github.com/termgate/termgate/gateway/wire"
)

// TestWriteNeedsAnOffset: a write that a resend could apply twice is
// refused before anything is sent.
func TestWriteNeedsAnOffset(t *testing.T) {
	t.Parallel()
	if _, err := new(Client).Write(t.Context(), "x", wire.WriteRequest{Input: "ls\n"}); !errors.Is(err, ErrNoOffset) {
		t.Fatalf("Write without an offset: %v", err)
	}
}
