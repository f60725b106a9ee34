//go:build !linux

package main

import (
	"strings"
	"testing"
)

// TestSandboxCommandsSayTheyNeedLinux: off Linux the sandbox commands
// answer --help, and otherwise say why they cannot run and what can.
func TestSandboxCommandsSayTheyNeedLinux(t *testing.T) {
	t.Parallel()
	for _, c := range commands() {
		if !c.linux {
			continue
		}
		code, out, _ := runCLI(t, "", c.name, "--help")
		if code != 0 || !strings.Contains(out, "Linux only.") {
			t.Errorf("termgate %s --help: status %d, %q", c.name, code, out)
		}
		code, _, stderr := runCLI(t, "", c.name)
		if code != 1 || !strings.Contains(stderr, "runs on Linux only") || !strings.Contains(stderr, "attach") {
			t.Errorf("termgate %s: status %d, stderr %q", c.name, code, stderr)
		}
	}
}
