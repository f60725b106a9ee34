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

// TestControlQueueGivesBackWhatIsNeverWritten: messages a writer took
// and could not write (its connection failed), or puts back after the
// queue ended, leave the subject's budget, so the subject's other
// connections keep their snapshots.
func TestControlQueueGivesBackWhatIsNeverWritten(t *testing.T) {
	t.Parallel()
	subject := new(atomic.Int64)
	q := &controlMessages{max: 1 << 20, subject: subject, maxSub: 1 << 20}
	for range 3 {
		if !q.addEncoded(make([]byte, 1000)) {
			t.Fatal("a message within the budgets was refused")
		}
	}
	ms := q.take()
	q.wrote(&(*ms)[0]) // the first written, then the connection failed
	q.dropAll()
	q.putBack((*ms)[1:2]) // a writer that saw congestion before the end
	q.abandon((*ms)[2:])  // one that failed
	q.done(ms)
	if n := subject.Load(); n != 0 {
		t.Fatalf("%d bytes still counted against the subject after its connection ended", n)
	}
	if q.bytes != 0 {
		t.Fatalf("%d bytes still counted against the connection", q.bytes)
	}
}
