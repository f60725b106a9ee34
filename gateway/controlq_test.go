package gateway

import (
	"sync/atomic"
	"testing"

	"github.com/termgate/termgate/gateway/wire"
)

// TestControlQueueBudgetsBytes: encoded messages are queued only within
// the connection's and the subject's bytes; written or dropped, their
// bytes are given back, and an ended queue takes nothing more.
func TestControlQueueBudgetsBytes(t *testing.T) {
	t.Parallel()
	subject := new(atomic.Int64)
	a := &controlMessages{max: 1000, subject: subject, maxSub: 1400}
	b := &controlMessages{max: 1000, subject: subject, maxSub: 1400}
	msg := make([]byte, 600)
	if !a.addEncoded(msg) || a.addEncoded(msg) {
		t.Fatal("a connection's budget: want the first of two 600-byte messages in 1000 bytes, not the second")
	}
	if !b.add(wire.Message{Type: wire.MsgPong}) || b.addEncoded(msg) {
		t.Fatal("the subject's budget: want no 600 more bytes on top of 600 and a message in 1400")
	}
	ms := a.take()
	for i := range *ms {
		a.wrote(&(*ms)[i])
	}
	a.done(ms)
	if !b.addEncoded(msg) {
		t.Fatal("the bytes written were not given back to the subject")
	}
	b.dropAll()
	if n := subject.Load(); n != 0 {
		t.Fatalf("%d bytes counted once every message was written or dropped", n)
	}
	if b.add(wire.Message{Type: wire.MsgPong}) || subject.Load() != 0 {
		t.Fatal("an ended queue took a message")
	}
}
