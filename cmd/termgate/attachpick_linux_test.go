package main

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// TestAttachPicksOnATerminal: attach without --id on a real terminal
// lists the tenant's executions and attaches to the one whose number the
// user types.
func TestAttachPicksOnATerminal(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	tok := g.token(t, "acme", allScopes)
	for _, id := range []string{"first", "second"} {
		if code, _, stderr := runCLI(t, "", "run", "--id", id, "--url", g.url, "--token", tok, "--", "/bin/sh", "-c", "echo output of "+id); code != 0 {
			t.Fatalf("run %s: %d %s", id, code, stderr)
		}
	}
	master, tty, err := pty.Open()
	if err != nil {
		sandboxtest.Unavailable(t, "no terminal: %v", err)
	}
	t.Cleanup(func() { master.Close(); tty.Close() })
	go drain(master) // the terminal's echo
	var out, errb sandboxtest.SyncBuffer
	done := make(chan error, 1)
	go func() { done <- run(t.Context(), []string{"attach", "--url", g.url, "--token", tok}, tty, &out, &errb) }()
	number := regexp.MustCompile(`(?m)^(\d+)\s+second\s`)
	var m []string
	if !sandboxtest.Eventually(t, 30*time.Second, func() bool {
		m = number.FindStringSubmatch(errb.String())
		return m != nil && strings.Contains(errb.String(), "Attach to which?")
	}) {
		t.Fatalf("no list with a prompt: %q", errb.String())
	}
	master.WriteString(m[1] + "\n")
	select {
	case err := <-done:
		if err != nil || out.String() != "output of second\n" {
			t.Fatalf("attach: %v, output %q, stderr %q", err, out.String(), errb.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("attach did not end; output %q, stderr %q", out.String(), errb.String())
	}
}

// drain reads f until it fails (it is closed).
func drain(f interface{ Read([]byte) (int, error) }) {
	buf := make([]byte, 4096)
	for {
		if _, err := f.Read(buf); err != nil {
			return
		}
	}
}
