package main

import (
	"strings"
	"testing"

	"github.com/termgate/termgate/gateway/gatewaytest"
	"github.com/termgate/termgate/gateway/wire"
)

// scriptedCLI runs termgate with args against a scripted gateway,
// which play serves; it returns the exit status and stderr.
func scriptedCLI(t *testing.T, args []string, play func(s *gatewaytest.Scripted, conn *gatewaytest.ScriptConn)) (int, string) {
	t.Helper()
	s := gatewaytest.NewScripted(t)
	type result struct {
		code   int
		stderr string
	}
	done := make(chan result, 1)
	go func() {
		code, _, stderr := runCLI(t, "", append([]string{args[0], "--url", s.URL, "--token", "t"}, args[1:]...)...)
		done <- result{code, stderr}
	}()
	conn := s.Accept(t)
	conn.Handshake(t, gatewaytest.Hello())
	play(s, conn)
	r := <-done
	return r.code, r.stderr
}

// startJob answers run's start and attach: the command runs as "job" on
// channel 1 and has printed "1\n".
func startJob(t *testing.T, conn *gatewaytest.ScriptConn) {
	t.Helper()
	start := conn.Request(t, wire.TypeStart)
	conn.Send(t, wire.Message{Type: wire.MsgStarted, Req: start.Req, ID: "job", Status: "running"})
	attach := conn.Request(t, wire.TypeAttach)
	conn.Attached(t, attach, 1, wire.Message{ID: "job", Ack: true, Incarnation: "i1"})
	conn.SendOutput(t, 1, 1, 2, 0, []byte("1\n"))
}

// restartWithout closes conn with 1012 and answers the reattach on the
// next connection with an error code.
func restartWithout(t *testing.T, s *gatewaytest.Scripted, conn *gatewaytest.ScriptConn, code string) {
	t.Helper()
	conn.Close(wire.CloseServiceRestart, "server restarting; reconnect and resume")
	next := s.Accept(t)
	next.Handshake(t, gatewaytest.Hello())
	req := next.Request(t, wire.TypeAttach)
	next.Send(t, wire.Message{Type: wire.MsgError, Req: req.Req, Error: code, Message: "session: " + code})
}

// TestRunAndAttachExit255WhenTheGatewayIsGone: run and attach exit 255
// with one line saying what happened, never a status the command could
// have: the gateway unreachable past --reconnect, the execution gone
// after a restart, an ID the gateway does not know.
func TestRunAndAttachExit255WhenTheGatewayIsGone(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		play func(t *testing.T, s *gatewaytest.Scripted, conn *gatewaytest.ScriptConn)
		says string
	}{
		{"run, gateway gone", []string{"run", "--reconnect", "1s", "--", "/bin/sh"},
			func(t *testing.T, s *gatewaytest.Scripted, conn *gatewaytest.ScriptConn) {
				startJob(t, conn)
				conn.Close(wire.CloseServiceRestart, "server restarting; reconnect and resume")
				s.Down()
			}, "unreachable for 1s; the execution may still be running: termgate attach --id job"},
		{"run, execution gone", []string{"run", "--", "/bin/sh"},
			func(t *testing.T, s *gatewaytest.Scripted, conn *gatewaytest.ScriptConn) {
				startJob(t, conn)
				restartWithout(t, s, conn, wire.CodeGone)
			}, "the server restarted and no longer has execution job"},
		{"attach, gateway gone", []string{"attach", "--id", "job", "--reconnect", "1s"},
			func(t *testing.T, s *gatewaytest.Scripted, conn *gatewaytest.ScriptConn) {
				conn.Attached(t, conn.Request(t, wire.TypeAttach), 1, wire.Message{ID: "job", Ack: true, Incarnation: "i1"})
				conn.Close(wire.CloseServiceRestart, "server restarting; reconnect and resume")
				s.Down()
			}, "unreachable for 1s; the execution may still be running: termgate attach --id job"},
		{"attach, execution gone", []string{"attach", "--id", "job"},
			func(t *testing.T, s *gatewaytest.Scripted, conn *gatewaytest.ScriptConn) {
				conn.Attached(t, conn.Request(t, wire.TypeAttach), 1, wire.Message{ID: "job", Ack: true, Incarnation: "i1"})
				restartWithout(t, s, conn, wire.CodeGone)
			}, "the server restarted and no longer has execution job"},
		{"attach, not found", []string{"attach", "--id", "nope"},
			func(t *testing.T, s *gatewaytest.Scripted, conn *gatewaytest.ScriptConn) {
				req := conn.Request(t, wire.TypeAttach)
				conn.Send(t, wire.Message{Type: wire.MsgError, Req: req.Req, Error: wire.CodeNotFound, Message: "session: execution not found"})
			}, "has no execution nope (a wrong ID, another tenant's, or its retention expired)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, stderr := scriptedCLI(t, tc.args, func(s *gatewaytest.Scripted, conn *gatewaytest.ScriptConn) { tc.play(t, s, conn) })
			lines := strings.Split(strings.TrimSpace(stderr), "\n")
			last := lines[len(lines)-1]
			if code != exitGateway || !strings.HasPrefix(last, "termgate: ") || !strings.Contains(last, tc.says) {
				t.Fatalf("exit %d, stderr %q; want %d and a last line saying %q", code, stderr, exitGateway, tc.says)
			}
		})
	}
}

// TestReconnectFlagIsBounded: --reconnect outside 1s to 24h is a usage
// error.
func TestReconnectFlagIsBounded(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"0s", "500ms", "25h", "-1s"} {
		code, _, stderr := runCLI(t, "", "run", "--url", "http://127.0.0.1:1", "--token", "t", "--reconnect", v, "--", "/bin/sh")
		if code != 2 || !strings.Contains(stderr, "--reconnect") {
			t.Errorf("--reconnect %s: exit %d, stderr %q; want 2 naming the flag", v, code, stderr)
		}
	}
}

// TestRunExits255WhenTheGatewayIsUnreachable: no gateway at the URL at
// all is termgate's failure too, not the command's.
func TestRunExits255WhenTheGatewayIsUnreachable(t *testing.T) {
	t.Parallel()
	s := gatewaytest.NewScripted(t)
	s.Down()
	code, _, stderr := runCLI(t, "", "run", "--url", s.URL, "--token", "t", "--", "/bin/sh")
	if code != exitGateway || !strings.Contains(stderr, "cannot reach the gateway at "+s.URL) || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
		t.Fatalf("exit %d, stderr %q; want %d and one line", code, stderr, exitGateway)
	}
}

// TestHelpListsExitStatuses: run's and attach's help carry the exit
// status table README.md has.
func TestHelpListsExitStatuses(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"run", "attach"} {
		code, out, _ := runCLI(t, "", "help", cmd)
		if code != 0 || !strings.Contains(out, "Exit status:\n") || !strings.Contains(out, "  255    termgate failed") || !strings.Contains(out, "--reconnect") {
			t.Errorf("help %s: exit %d, no exit status table or --reconnect:\n%s", cmd, code, out)
		}
	}
}
