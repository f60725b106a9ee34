package client_test

import (
	"testing"
	"time"

	"github.com/termgate/termgate/gateway/client"
	"github.com/termgate/termgate/gateway/wire"
)

// TestNoticeIsAnEvent: a notice event arrives as an Event of kind notice
// with its reason, message and time; one withdrawing a warning has no
// time.
func TestNoticeIsAnEvent(t *testing.T) {
	t.Parallel()
	c, _, conn := scripted(t, wire.Message{})
	e, _ := attachJob(t, c, conn, wire.Message{})
	conn.Send(t, wire.Message{Type: wire.MsgEvent, Channel: 1, Seq: 1, Event: wire.EventNotice,
		Reason: wire.NoticeIdleTimeout, Message: "stopped soon", At: "2026-12-01T14:05:00Z"})
	conn.Send(t, wire.Message{Type: wire.MsgEvent, Channel: 1, Seq: 2, Event: wire.EventNotice,
		Reason: wire.NoticeIdleCancelled, Message: "no longer idle"})
	want := []client.Notice{
		{Reason: wire.NoticeIdleTimeout, Message: "stopped soon", At: time.Date(2026, 12, 1, 14, 5, 0, 0, time.UTC)},
		{Reason: wire.NoticeIdleCancelled, Message: "no longer idle"},
	}
	for i, w := range want {
		ev, err := e.Next(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if ev.Kind != "notice" || ev.Seq != uint64(i+1) || ev.Notice == nil || ev.Notice.Reason != w.Reason ||
			ev.Notice.Message != w.Message || !ev.Notice.At.Equal(w.At) {
			t.Errorf("event %d: %+v (notice %+v), want notice %+v", i, ev, ev.Notice, w)
		}
	}
}
