package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"

	"github.com/termgate/termgate/gateway/wire"
)

// Exec starts a command (or continues the execution r.ID names, when r
// has no Argv or Command) and waits for it: the answer comes when it
// exits or when r's yield passes (PROTOCOL.md, "Agent exec"). A start
// without an ID is given one here, so that the request, sent again on
// the next connection when this one breaks, finds the execution its
// first try made. Pass the NextSeq of the last answer as r.Seq for an
// answer that is exact across such retries.
func (c *Client) Exec(ctx context.Context, r wire.ExecRequest) (wire.ExecResult, error) {
	if r.ID == "" && (r.Argv != nil || r.Command != "") {
		var b [10]byte
		rand.Read(b[:])
		r.ID = "x-" + hex.EncodeToString(b[:])
	}
	return c.agentCall(ctx, wire.Request{Type: wire.TypeExec, Exec: &r})
}

// ErrNoOffset is Write's answer to a write without an offset, which a
// retry could apply twice.
var ErrNoOffset = errors.New("client: Write needs the input offset its input starts at (WriteRequest.Offset)")

// Write writes r.Input to execution id at r.Offset, which it needs (the
// request may be sent again after a broken connection, and is applied
// once), and waits for what follows as Exec does.
func (c *Client) Write(ctx context.Context, id string, r wire.WriteRequest) (wire.ExecResult, error) {
	if r.Offset == nil {
		return wire.ExecResult{}, ErrNoOffset
	}
	return c.agentCall(ctx, wire.Request{Type: wire.TypeWrite, ID: id, Write: &r})
}

func (c *Client) agentCall(ctx context.Context, r wire.Request) (wire.ExecResult, error) {
	m, err := c.request(ctx, r)
	if err != nil {
		return wire.ExecResult{}, err
	}
	if m.Result == nil {
		return wire.ExecResult{}, &Error{Code: wire.CodeInternal, Message: "the server answered " + m.Type + " without a result"}
	}
	return *m.Result, nil
}
