package main

import (
	"strings"
	"testing"
)

// TestHelpNeverPrintsTheToken: help and flag typos print the flags'
// defaults, and the token's comes from the environment.
func TestHelpNeverPrintsTheToken(t *testing.T) {
	const secret = "eyJhbGciOiJIUzI1NiJ9.secret-token-value.sig"
	t.Setenv("TERMGATE_TOKEN", secret)
	t.Setenv("TERMGATE_URL", "http://gateway.example:8080")
	for _, args := range [][]string{
		{"run", "--help"}, {"attach", "-h"}, {"ls", "--no-such-flag"}, {"logs", "--help"}, {"cancel", "--bogus"},
	} {
		_, stdout, stderr := runCLI(t, "", args...)
		out := stdout + stderr
		if strings.Contains(out, secret) {
			t.Errorf("termgate %q printed the token:\n%s", args, out)
		}
		if !strings.Contains(out, "(from TERMGATE_TOKEN)") || !strings.Contains(out, "(from TERMGATE_URL)") {
			t.Errorf("termgate %q: help does not say where the defaults come from:\n%s", args, out)
		}
	}
}
