//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/coder/websocket"
	"github.com/termgate/termgate/gateway/wire"
)

// session is one WebSocket connection with one attached execution, on
// the wire protocol alone (no client-side pacing: a keystroke goes out
// as soon as it is sent).
type session struct {
	ws      *websocket.Conn
	channel uint32
	offset  uint64       // input sent
	buf     bytes.Buffer // the last message read
}

// dial connects to srv and starts id running command, attached, on a PTY.
func dial(ctx context.Context, srv *server, id string, command ...string) (*session, error) {
	ws, _, err := websocket.Dial(ctx, "ws://"+srv.addr+"/v1/connect", &websocket.DialOptions{
		Subprotocols: []string{wire.Subprotocol},
		HTTPHeader:   http.Header{"Authorization": {"Bearer " + srv.token}},
	})
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	ws.SetReadLimit(64 << 20)
	s := &session{ws: ws}
	req := wire.Request{Type: wire.TypeStart, ID: id, Command: command[0], Args: command[1:],
		PTY: &wire.Size{Rows: 24, Cols: 80}, Attach: true, TimeoutMS: 3600_000}
	if err := s.send(ctx, req); err != nil {
		s.close()
		return nil, err
	}
	for {
		m, out, err := s.read(ctx)
		switch {
		case err != nil:
			s.close()
			return nil, fmt.Errorf("start %s: %w", id, err)
		case out == nil && m.Type == wire.MsgAttached:
			s.channel = m.Channel
			return s, nil
		case out == nil && m.Type == wire.MsgError:
			s.close()
			return nil, fmt.Errorf("start %s: %s: %s", id, m.Error, m.Message)
		}
	}
}

func (s *session) send(ctx context.Context, r wire.Request) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return s.ws.Write(ctx, websocket.MessageText, b)
}

// input sends p as one input frame.
func (s *session) input(ctx context.Context, p []byte) error {
	err := s.ws.Write(ctx, websocket.MessageBinary, wire.AppendInput(nil, s.channel, s.offset, p))
	s.offset += uint64(len(p))
	return err
}

// read returns the next control message, or output when out is set;
// out's data is the session's buffer's until its next read.
func (s *session) read(ctx context.Context) (m wire.Message, out *wire.Output, err error) {
	typ, b, err := readMessage(ctx, s.ws, &s.buf)
	if err != nil {
		return m, nil, err
	}
	if typ == websocket.MessageBinary {
		o, err := wire.DecodeOutput(b)
		return m, &o, err
	}
	return m, nil, json.Unmarshal(b, &m)
}

// output returns the next output bytes; a refusal or the exit is an error.
func (s *session) output(ctx context.Context) ([]byte, error) {
	for {
		m, out, err := s.read(ctx)
		switch {
		case err != nil:
			return nil, err
		case out != nil:
			return out.Data, nil
		case m.Type == wire.MsgError && m.Error == wire.CodeRateLimited:
			return nil, fmt.Errorf("%s: %s (keys typed back to back outrun serve's --input-per-second: raise it with -input-per-second)", m.Error, m.Message)
		case m.Type == wire.MsgError:
			return nil, fmt.Errorf("%s: %s", m.Error, m.Message)
		case m.Type == wire.MsgExit:
			return nil, fmt.Errorf("the execution exited")
		}
	}
}

func (s *session) close() { s.ws.CloseNow() }
