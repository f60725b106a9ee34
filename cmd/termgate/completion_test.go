package main

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// TestCompletionHasEveryCommandAndFlag: the scripts come from commands()
// and the flag sets, so every command and every flag is completed.
func TestCompletionHasEveryCommandAndFlag(t *testing.T) {
	t.Parallel()
	for _, shell := range []string{"bash", "zsh", "fish"} {
		code, script, stderr := runCLI(t, "", "completion", shell)
		if code != 0 {
			t.Fatalf("completion %s: status %d, %s", shell, code, stderr)
		}
		for _, c := range commands() {
			if !strings.Contains(script, c.name) {
				t.Errorf("completion %s lacks command %s", shell, c.name)
			}
			for _, f := range completionFlags(c.flags()) {
				want := "--" + f.name
				if shell == "fish" {
					want = "-l " + f.name
				}
				if !strings.Contains(script, want) {
					t.Errorf("completion %s lacks %s of %s", shell, want, c.name)
				}
			}
		}
		if sh, err := exec.LookPath(shell); err == nil && shell != "fish" {
			if out, err := exec.Command(sh, "-n", "-c", script).CombinedOutput(); err != nil {
				t.Errorf("completion %s: %s -n: %v: %s", shell, shell, err, out)
			}
		}
	}
	if code, _, _ := runCLI(t, "", "completion", "tcsh"); code != 2 {
		t.Errorf("completion tcsh: status %d, want 2", code)
	}
}

// TestEveryCommandHasHelp: --help exits 0 with the usage line, the
// flags with double dashes and examples.
func TestEveryCommandHasHelp(t *testing.T) {
	t.Parallel()
	singleDash := regexp.MustCompile(`(?m)^  -[a-z]`)
	for _, c := range commands() {
		code, out, stderr := runCLI(t, "", c.name, "--help")
		if code != 0 || !strings.HasPrefix(out, "Usage: termgate "+c.name) || !strings.Contains(out, "\nExamples:\n  ") {
			t.Errorf("termgate %s --help: status %d, stdout %q, stderr %q", c.name, code, out, stderr)
		}
		if singleDash.MatchString(out) {
			t.Errorf("termgate %s --help shows single-dash flags:\n%s", c.name, out)
		}
		for _, f := range completionFlags(c.flags()) {
			if !strings.Contains(out, "\n  --"+f.name) {
				t.Errorf("termgate %s --help lacks --%s", c.name, f.name)
			}
		}
	}
	code, out, _ := runCLI(t, "", "help", "logs")
	if code != 0 || !strings.HasPrefix(out, "Usage: termgate logs") {
		t.Errorf("termgate help logs: status %d, %q", code, out)
	}
	if code, _, stderr := runCLI(t, "", "logs", "--bogus"); code != 2 || !strings.Contains(stderr, "not defined: --bogus") {
		t.Errorf("termgate logs --bogus: status %d, stderr %q", code, stderr)
	}
}
