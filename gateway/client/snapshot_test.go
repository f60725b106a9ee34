package client_test

import (
	"testing"

	"github.com/termgate/termgate/gateway/client"
	"github.com/termgate/termgate/gateway/gatewaytest"
	"github.com/termgate/termgate/gateway/wire"
)

// TestSnapshotStandsInForHistory: with a server that offers snapshots,
// AttachWith asks for one; the snapshot event carries the screen, the
// execution continues after its sequence, and a reattach says so.
func TestSnapshotStandsInForHistory(t *testing.T) {
	t.Parallel()
	hello := helloWith(wire.FeatureSnapshot)
	c, s, conn := scripted(t, hello)
	done := make(chan *client.Execution, 1)
	go func() {
		e, err := c.AttachWith(t.Context(), "tui", client.AttachOptions{Snapshot: true})
		if err != nil {
			t.Error(err)
		}
		done <- e
	}()
	req := conn.Request(t, wire.TypeAttach)
	if !req.Snapshot || !req.Ack {
		t.Fatalf("attach %+v: want snapshot and ack", req)
	}
	conn.Attached(t, req, 1, wire.Message{PTY: true, Ack: true, Incarnation: "i1", FirstSeq: 41, LastSeq: 41})
	e := <-done
	conn.Send(t, wire.Message{Type: wire.MsgSnapshot, Channel: 1, Seq: 40, Seen: 900, Rows: 24, Cols: 80, Data: "\x1bcscreen", From: 1, To: 41, Bytes: 900})
	conn.SendOutput(t, 1, 41, 1, 900, []byte("x"))
	ev := next(t, e)
	if ev.Kind != "snapshot" || string(ev.Data) != "\x1bcscreen" || ev.Seq != 40 || ev.Offset != 900 || ev.Rows != 24 || ev.Gap == nil || ev.Gap.Bytes != 900 {
		t.Fatalf("first event %+v; want the snapshot", ev)
	}
	if ev := next(t, e); ev.Kind != "output" || ev.Seq != 41 {
		t.Fatalf("then %+v; want output 41", ev)
	}
	conn.Drop()
	conn = s.Accept(t)
	conn.Handshake(t, hello)
	again := conn.Request(t, wire.TypeAttach)
	if again.After != 41 || again.Seen != 901 || !again.Snapshot {
		t.Fatalf("reattach %+v; want after 41, seen 901, snapshot", again)
	}
}

// helloWith is the scripted server's hello with more features.
func helloWith(features ...string) wire.Message {
	h := gatewaytest.Hello()
	h.Features = append(h.Features, features...)
	return h
}
