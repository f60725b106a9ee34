package gateway

import (
	"testing"

	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/session/sessiontest"
)

// TestSpecGivesBashAPrompt: an interactive bash gets a prompt that says
// who and where it is, unless the client sets PS1; other shells, whose
// PS1 reads otherwise, and pipes get none.
func TestSpecGivesBashAPrompt(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, &sessiontest.Launcher{}, nil)
	pty := &wire.Size{Rows: 24, Cols: 80}
	cases := []struct {
		name string
		req  wire.Request
		want string // "" is no PS1
	}{
		{"default command on a terminal", wire.Request{PTY: pty}, DefaultPS1},
		{"bash on a terminal", wire.Request{Command: "bash", PTY: pty}, DefaultPS1},
		{"the client's own", wire.Request{Command: "/bin/bash", PTY: pty, Env: map[string]string{"PS1": "> "}}, "> "},
		{"sh", wire.Request{Command: "/bin/sh", PTY: pty}, ""},
		{"bash on pipes", wire.Request{Command: "/bin/bash"}, ""},
	}
	for _, c := range cases {
		sp, err := e.srv.spec("acme", c.req)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := sp.Policy.Env["PS1"]; got != c.want {
			t.Errorf("%s: PS1 = %q, want %q", c.name, got, c.want)
		}
	}
}
