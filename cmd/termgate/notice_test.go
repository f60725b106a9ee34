package main

import (
	"strings"
	"testing"
	"time"

	"github.com/termgate/termgate/gateway/gatewaytest"
	"github.com/termgate/termgate/gateway/wire"
)

// TestRunPrintsNotices: termgate run prints the gateway's notices on
// stderr, with the time a timeout fires in local time, and the output
// stays the command's.
func TestRunPrintsNotices(t *testing.T) {
	t.Parallel()
	at := time.Now().Add(time.Minute).Truncate(time.Second)
	s := gatewaytest.NewScripted(t)
	type result struct {
		code        int
		out, stderr string
	}
	done := make(chan result, 1)
	go func() {
		c, out, stderr := runCLI(t, "", "run", "--url", s.URL, "--token", "t", "--", "/bin/sh", "-c", "sleep 600")
		done <- result{c, out, stderr}
	}()
	conn := s.Accept(t)
	conn.Handshake(t, gatewaytest.Hello())
	start := conn.Request(t, wire.TypeStart)
	conn.Send(t, wire.Message{Type: wire.MsgStarted, Req: start.Req, ID: "job", Status: "running"})
	attach := conn.Request(t, wire.TypeAttach)
	conn.Attached(t, attach, 1, wire.Message{ID: "job", Incarnation: "i1"})
	conn.SendOutput(t, 1, 1, 2, 0, []byte("working\n"))
	stamp := at.UTC().Format(time.RFC3339)
	conn.Send(t, wire.Message{Type: wire.MsgEvent, Channel: 1, Seq: 2, Event: wire.EventNotice, Reason: wire.NoticeIdleTimeout, Message: "m1", At: stamp})
	conn.Send(t, wire.Message{Type: wire.MsgEvent, Channel: 1, Seq: 3, Event: wire.EventNotice, Reason: wire.NoticeIdleCancelled, Message: "m2"})
	conn.Send(t, wire.Message{Type: wire.MsgEvent, Channel: 1, Seq: 4, Event: wire.EventNotice, Reason: wire.NoticeTimeout, Message: "m3", At: stamp})
	conn.Send(t, wire.Message{Type: wire.MsgEvent, Channel: 1, Seq: 5, Event: wire.EventNotice, Reason: "maintenance", Message: "the server restarts soon"})
	code := -1
	conn.Send(t, wire.Message{Type: wire.MsgExit, Channel: 1, Seq: 6, Code: &code, Signal: "SIGTERM", Reason: "timed_out"})
	r := <-done
	local := at.Local().Format("15:04:05")
	for _, want := range []string{
		"termgate: this command will be stopped at " + local + " (idle: no writer attached and no input)\n",
		"termgate: no longer idle: this command keeps running\n",
		"termgate: this command will be stopped at " + local + " (its timeout ends)\n",
		"termgate: the server restarts soon\n",
		"termgate: timed_out\n",
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	if r.out != "working\n" || r.code != 128+15 {
		t.Errorf("stdout %q, status %d; want the command's output and 143", r.out, r.code)
	}
}
