package main

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestCLIReferenceIsFresh: docs/cli.md is what the command table and the
// flag sets make now, so a flag added, renamed or given a new default
// shows there (only on Linux: elsewhere the sandbox commands have no
// flags).
func TestCLIReferenceIsFresh(t *testing.T) {
	t.Parallel()
	got, err := os.ReadFile(filepath.Join("..", "..", "docs", "cli.md"))
	if err != nil {
		t.Fatalf("%v: make it with %s", err, cliDocCommand)
	}
	want := cliReference()
	if string(got) == want {
		return
	}
	gl, wl := strings.Split(string(got), "\n"), strings.Split(want, "\n")
	for i := 0; i < len(gl) || i < len(wl); i++ {
		g, w := "(end)", "(end)"
		if i < len(gl) {
			g = gl[i]
		}
		if i < len(wl) {
			w = wl[i]
		}
		if g != w {
			t.Fatalf("docs/cli.md is stale: run %s\nline %d is\n\t%s\nwant\n\t%s", cliDocCommand, i+1, g, w)
		}
	}
}

// TestCLIDocCommandWritesTheReference: the go:generate line's command
// writes exactly cliReference.
func TestCLIDocCommandWritesTheReference(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "cli.md")
	if code, _, stderr := runCLI(t, "", cliDocArg, path); code != 0 {
		t.Fatalf("%s: status %d, %s", cliDocArg, code, stderr)
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != cliReference() {
		t.Errorf("%s wrote %d bytes (%v), not the reference", cliDocArg, len(got), err)
	}
	if code, _, _ := runCLI(t, "", cliDocArg); code != 2 {
		t.Errorf("%s without a file: status %d, want 2", cliDocArg, code)
	}
}

// TestEveryFlagDocumented: every flag's row has a meaning, serve's and
// workspaces' flags their TERMGATE_* variable (but --print-config and
// --json), and no meaning keeps
// the environment or default notes the reference lists in columns.
func TestEveryFlagDocumented(t *testing.T) {
	t.Parallel()
	leftover := regexp.MustCompile(`(\(|; )default[ :]|\(env |\(from TERMGATE_`)
	for _, c := range commands() {
		c.flags().VisitAll(func(f *flag.Flag) {
			d := describeFlag(f)
			if strings.TrimSpace(d.meaning) == "" || leftover.MatchString(d.meaning) {
				t.Errorf("%s --%s: meaning %q", c.name, f.Name, d.meaning)
			}
			envFlagged := c.name == "serve" || c.name == "workspaces"
			if envFlagged && f.Name != "print-config" && f.Name != "json" && d.env != envName(f.Name) && d.env != envName(f.Name)+" (comma-separated)" {
				t.Errorf("%s --%s: environment %q, want %s", c.name, f.Name, d.env, envName(f.Name))
			}
		})
	}
}

// TestDescribeFlag: the usage notes become columns, the rest stays.
func TestDescribeFlag(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		usage, def      string
		meaning, dv, ev string
	}{
		{"address to listen on (env TERMGATE_LISTEN)", "127.0.0.1:8080", "address to listen on", "127.0.0.1:8080", "TERMGATE_LISTEN"},
		{"memory per execution (default 1G; 0: none) (env TERMGATE_MEMORY)", "", "memory per execution (0: none)", "1G", "TERMGATE_MEMORY"},
		{"a program (repeatable; env TERMGATE_COMMAND, comma-separated)", "", "a program (repeatable)", "", "TERMGATE_COMMAND (comma-separated)"},
		{"bearer `TOKEN` (from TERMGATE_TOKEN)", "", "bearer TOKEN", "", "TERMGATE_TOKEN"},
		{"recordings (absolute; default none: nothing is recorded)", "", "recordings (absolute)", "none: nothing is recorded", ""},
		{"subject (default: the tenant)", "", "subject", "the tenant", ""},
		{"a timeout (server default when 0)", "0s", "a timeout (server default when 0)", "0s", ""},
	} {
		d := describeFlag(&flag.Flag{Name: "x", Usage: tc.usage, DefValue: tc.def})
		if d.meaning != tc.meaning || d.def != tc.dv || d.env != tc.ev {
			t.Errorf("%q: %+v, want meaning %q, default %q, env %q", tc.usage, d, tc.meaning, tc.dv, tc.ev)
		}
	}
}
