package main

import (
	"strings"
	"testing"
)

// TestHelpManifestKind: termgate help manifest KIND prints what
// termgate manifest KIND --help prints.
func TestHelpManifestKind(t *testing.T) {
	t.Parallel()
	for _, kind := range manifestKinds {
		code, got, stderr := runCLI(t, "", "help", "manifest", kind)
		_, want, _ := runCLI(t, "", "manifest", kind, "--help")
		if code != 0 || got != want || !strings.HasPrefix(got, "Usage: termgate manifest "+kind) {
			t.Errorf("help manifest %s: status %d (%s):\n%s\nwant:\n%s", kind, code, stderr, got, want)
		}
	}
	if code, _, _ := runCLI(t, "", "help", "manifest", "bogus"); code != 2 {
		t.Errorf("help manifest bogus: status %d, want 2", code)
	}
}
