//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/coder/websocket"
	"github.com/termgate/termgate/gateway/wire"
)

// The snapshot attack (-attack snapshot) is the hardening issue's recipe
// against the server's memory: a terminal of -attack-size cells with flow
// live draws 2000 lines of truecolor cells, switches to the alternate
// screen and draws 1000 more; once it ended, one connection asks twice
// for its screen (attach after 0 with a snapshot) and reads nothing.
// It prints the server's RSS idle, once the execution ended, at its peak
// while the attack's connection holds what it asked for for 20 s, -settle
// after it read all and closed, and the peak over the whole run (VmHWM,
// the drawing included).

// attackScript draws $1 lines of $2 cells, each in a truecolor of its
// own, on the normal screen, then $3 more on the alternate one.
const attackScript = `l=$(i=0; while [ $i -lt $2 ]; do printf '\033[38;2;%d;%d;%d;48;2;%d;%d;%dmx' $((i%256)) $((i*3%256)) $((i*7%256)) $((i*5%256)) $((i*11%256)) $((i*13%256)); i=$((i+1)); done)
n=0; while [ $n -lt $1 ]; do printf '%s\033[m\r\n' "$l"; n=$((n+1)); done
printf '\033[?1049h'
n=0; while [ $n -lt $3 ]; do printf '%s\033[m\r\n' "$l"; n=$((n+1)); done`

// snapshotAttack runs the attack on srv and prints its figures.
func snapshotAttack(ctx context.Context, srv *server, o options, w io.Writer) error {
	idle := statusKB(srv.pid, "VmRSS:")
	c, err := connect(ctx, srv)
	if err != nil {
		return err
	}
	defer c.close()
	size := strconv.Itoa(o.attackSize)
	start := wire.Request{Type: wire.TypeStart, ID: "attack", Command: "/bin/sh", Args: []string{"-c", attackScript, "sh", "2000", size, "1000"},
		PTY: &wire.Size{Rows: o.attackSize, Cols: o.attackSize}, Flow: wire.FlowLive, Attach: true, TimeoutMS: 600_000}
	began := time.Now()
	if err := c.send(ctx, start); err != nil {
		return err
	}
	var output int64
	for done := false; !done; {
		m, out, err := c.read(ctx)
		switch {
		case err != nil:
			return fmt.Errorf("follow the drawing: %w", err)
		case out != nil:
			output += int64(len(out.Data))
		case m.Type == wire.MsgGap:
			output += int64(m.Bytes)
		case m.Type == wire.MsgError:
			return fmt.Errorf("start: %s: %s", m.Error, m.Message)
		case m.Type == wire.MsgExit:
			done = true
		}
	}
	drawn := time.Since(began)
	time.Sleep(o.settle) // the execution finishes after its exit event
	ended := statusKB(srv.pid, "VmRSS:")

	a, err := connect(ctx, srv)
	if err != nil {
		return err
	}
	for range 2 {
		if err := a.send(ctx, wire.Request{Type: wire.TypeAttach, ID: "attack", After: 0, Snapshot: true}); err != nil {
			return err
		}
	}
	var peakRSS int64
	for range 400 { // 20 s: the attaches are served and their messages queued
		peakRSS = max(peakRSS, statusKB(srv.pid, "VmRSS:"))
		time.Sleep(50 * time.Millisecond)
	}
	hwm := statusKB(srv.pid, "VmHWM:")
	sizes := readAll(ctx, a) // what the server had for it, once it reads
	a.close()
	time.Sleep(o.settle)
	after, peak := statusKB(srv.pid, "VmRSS:"), statusKB(srv.pid, "VmHWM:")
	fmt.Fprintf(w, "snapshot attack, %dx%d terminal, flow live: %.1f MiB of output in %.1f s\n", o.attackSize, o.attackSize, float64(output)/(1<<20), drawn.Seconds())
	fmt.Fprintf(w, "serve RSS: idle %.1f MiB; execution ended %.1f MiB; two attaches unread for 20 s: sampled peak %.1f MiB, VmHWM %.1f MiB; %v after they were read and closed %.1f MiB; VmHWM over the run %.1f MiB (+%.1f over idle)\n",
		mib(idle), mib(ended), mib(peakRSS), mib(hwm), o.settle, mib(after), mib(peak), mib(peak-idle))
	fmt.Fprintf(w, "the attaches' messages, as read afterwards: %s\n", sizes)
	return nil
}

// mib turns kB into MiB.
func mib(kb int64) float64 { return float64(kb) / 1024 }

// connect opens a WebSocket to srv that takes messages of any size.
func connect(ctx context.Context, srv *server) (*session, error) {
	ws, _, err := websocket.Dial(ctx, "ws://"+srv.addr+"/v1/connect", &websocket.DialOptions{
		Subprotocols: []string{wire.Subprotocol},
		HTTPHeader:   http.Header{"Authorization": {"Bearer " + srv.token}},
	})
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	ws.SetReadLimit(1 << 30)
	return &session{ws: ws}, nil
}

// readAll reads what s was sent for 60 s at most, and describes the
// snapshots and gaps in it.
func readAll(ctx context.Context, s *session) string {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	desc, exits := "", 0
	for exits < 2 {
		typ, b, err := s.ws.Read(ctx)
		if err != nil {
			return desc + " (" + err.Error() + ")"
		}
		if typ != websocket.MessageText {
			continue
		}
		var m wire.Message
		if err := json.Unmarshal(b, &m); err != nil {
			continue
		}
		switch m.Type {
		case wire.MsgSnapshot:
			desc += fmt.Sprintf(" snapshot of %d bytes;", len(b))
		case wire.MsgGap:
			desc += fmt.Sprintf(" gap of %d events;", m.To-m.From)
		case wire.MsgExit:
			exits++
		}
	}
	return desc
}
