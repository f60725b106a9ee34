//go:build linux

package sandbox

import (
	"bytes"
	"io"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// testIdleAfter is idleAfter in this package's tests (TestMain): every
// test that pauses its output sends the copier through fdio's waiter and back.
const testIdleAfter = 20 * time.Millisecond

// TestIdleCopierGivesItsGoroutineUp: copiers whose output paused for
// idleAfter keep no goroutine; output that comes later arrives whole and
// in order, for readers that write and readers that lend their memory,
// on pipes and PTYs, and each copier still ends at end of file.
func TestIdleCopierGivesItsGoroutineUp(t *testing.T) {
	const copiers = 40
	type end struct {
		w     *os.File
		out   *sandboxtest.SyncBuffer
		ended chan struct{}
	}
	ends := make([]end, copiers)
	for i := range ends {
		open, reserve := openPipe, i%2 == 1
		if i%4 >= 2 {
			open = openPTY
		}
		r, w := open(t)
		e := end{w: w, out: &sandboxtest.SyncBuffer{}, ended: make(chan struct{})}
		c := newCopier(r, io.Discard, func() { close(e.ended) })
		c.stopping = new(atomic.Bool)
		if reserve {
			c.reserver = &ringOf{out: e.out}
		} else {
			c.w = e.out
		}
		go c.start()
		ends[i] = e
	}
	texts := []string{"first", "then", "last"}
	for round, text := range texts {
		for _, e := range ends {
			if _, err := e.w.Write([]byte(text)); err != nil {
				t.Fatal(err)
			}
		}
		want := strings.Join(texts[:round+1], "")
		for i, e := range ends {
			waitLen(t, e.out, len(want))
			if got := e.out.String(); got != want {
				t.Fatalf("copier %d after round %d: %q, want %q", i, round, got, want)
			}
		}
		if n := copierGoroutines(t, 0, 100*testIdleAfter); n != 0 {
			t.Fatalf("round %d: %d copiers kept their goroutine while idle", round, n)
		}
	}
	for i, e := range ends {
		e.w.Close()
		select {
		case <-e.ended:
		case <-time.After(10 * time.Second):
			t.Fatalf("copier %d did not end at end of file", i)
		}
	}
}

// copierGoroutines waits, at most d, until no more than want goroutines
// run a copier, and returns how many do.
func copierGoroutines(t *testing.T, want int, d time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		n := 0
		for g := range bytes.SplitSeq(buf, []byte("\n\n")) {
			if bytes.Contains(g, []byte("sandbox.(*copier).")) {
				n++
			}
		}
		if n <= want || time.Now().After(deadline) {
			return n
		}
		time.Sleep(testIdleAfter)
	}
}

// ringOf is a Reserver that keeps what was committed in out.
type ringOf struct {
	out *sandboxtest.SyncBuffer
	mem []byte
	k   int
}

func (r *ringOf) Write(b []byte) (int, error) { return r.out.Write(b) }
func (r *ringOf) Reserve(max int)             { r.mem, r.k = make([]byte, max), 0 }
func (r *ringOf) Extend(k int) []byte         { r.k += k; return r.mem[r.k-k : r.k] }
func (r *ringOf) Commit(n int) error          { r.out.Write(r.mem[:n]); return nil }
