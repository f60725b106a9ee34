package main

import (
	"strings"
	"testing"

	"github.com/termgate/termgate/gateway/gatewaytest"
	"github.com/termgate/termgate/gateway/wire"
)

// scriptRun plays a gateway for termgate run: the command starts as
// "job", prints, loses output to gap, and exits with code.
func scriptRun(t *testing.T, gap wire.Message, code int, flags ...string) (int, string, string) {
	t.Helper()
	s := gatewaytest.NewScripted(t)
	type result struct {
		code        int
		out, stderr string
	}
	done := make(chan result, 1)
	go func() {
		args := append(append([]string{"run", "--url", s.URL, "--token", "t"}, flags...), "--", "/bin/sh", "-c", "seq 1 1000000")
		c, out, stderr := runCLI(t, "", args...)
		done <- result{c, out, stderr}
	}()
	conn := s.Accept(t)
	conn.Handshake(t, gatewaytest.Hello())
	start := conn.Request(t, wire.TypeStart)
	conn.Send(t, wire.Message{Type: wire.MsgStarted, Req: start.Req, ID: "job", Status: "running"})
	attach := conn.Request(t, wire.TypeAttach)
	conn.Attached(t, attach, 1, wire.Message{ID: "job", Ack: true, Incarnation: "i1"})
	conn.SendOutput(t, 1, 1, 2, 0, []byte("1\n"))
	gap.Type, gap.Channel = wire.MsgGap, 1
	conn.Send(t, gap)
	conn.SendOutput(t, 1, gap.To, 2, 2+gap.Bytes, []byte("1000000\n"))
	conn.Send(t, wire.Message{Type: wire.MsgExit, Channel: 1, Seq: gap.To + 1, Code: &code, Reason: "exited"})
	r := <-done
	return r.code, r.out, r.stderr
}

// TestRunExits74WhenOutputWasLost: a command that succeeded but whose
// output was lost makes run exit 74 and say why; --allow-loss keeps the
// command's status, and a failing command keeps its own.
func TestRunExits74WhenOutputWasLost(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		gap   wire.Message
		code  int
		flags []string
		want  int
		says  string
	}{
		{"hold expired", wire.Message{From: 2, To: 9, Bytes: 1234, Cause: wire.LossHoldExpired}, 0, nil, 74,
			"termgate: 1234 bytes of output were lost: the hold expired before a writer came back"},
		{"unheld, inexact", wire.Message{From: 2, To: 9, Bytes: 99, Cause: wire.LossUnheld, Inexact: true}, 0, nil, 74,
			"termgate: up to 99 bytes of output were lost: they were evicted while no acknowledging writer was attached"},
		{"live", wire.Message{From: 2, To: 9, Bytes: 5, Cause: wire.LossLive}, 0, nil, 74,
			"termgate: 5 bytes of output were lost: the execution runs with flow live"},
		{"allow loss", wire.Message{From: 2, To: 9, Bytes: 1234, Cause: wire.LossHoldExpired}, 0, []string{"--allow-loss"}, 0,
			"termgate: 1234 bytes of output were lost: the hold expired"},
		{"failing command", wire.Message{From: 2, To: 9, Bytes: 1234, Cause: wire.LossUnheld}, 3, nil, 3,
			"termgate: 1234 bytes of output were lost"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, out, stderr := scriptRun(t, tc.gap, tc.code, tc.flags...)
			if code != tc.want || out != "1\n1000000\n" || !strings.Contains(stderr, tc.says) {
				t.Fatalf("exit %d (want %d), stdout %q, stderr %q (want %q)", code, tc.want, out, stderr, tc.says)
			}
			if strings.Contains(stderr, "disconnected") {
				t.Fatalf("stderr blames a disconnect that did not happen: %q", stderr)
			}
			if wants74 := tc.want == 74; wants74 != strings.Contains(stderr, "--allow-loss") {
				t.Fatalf("stderr %q: the exit 74 note should appear exactly when exiting 74", stderr)
			}
		})
	}
}
