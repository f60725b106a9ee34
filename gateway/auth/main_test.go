package auth

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: a JWKS
// authenticator's fetches end with Close.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
