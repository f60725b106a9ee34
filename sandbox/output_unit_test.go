//go:build linux

package sandbox

import (
	"bytes"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
	"golang.org/x/sys/unix"
)

// copyOutput drains r into w until end of file or error, as a process's
// copier does (parked while idle), and closes r.
func copyOutput(r *os.File, w io.Writer) {
	c := newCopier(r, io.Discard, nil)
	c.w = w
	runCopier(c)
}

// copyReserved drains r into w's own memory until end of file or error, as
// a process's copier does, and closes r: an event holds what waited when
// the copier woke and what came meanwhile, up to maxReadBuf. The first
// bytes also go to head.
func copyReserved(r *os.File, w Reserver, head io.Writer) {
	c := newCopier(r, head, nil)
	c.reserver = w
	runCopier(c)
}

// runCopier runs c to its end.
func runCopier(c *copier) {
	ended := make(chan struct{})
	c.stopping, c.done = new(atomic.Bool), func() { close(ended) }
	c.start()
	<-ended
}

// waitLen waits, a bounded time, until b holds n bytes.
func waitLen(t *testing.T, b *sandboxtest.SyncBuffer, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); b.Len() < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("copied %d bytes, want %d", b.Len(), n)
		}
	}
}

// TestCopyOutput drives the copier over a pipe and a PTY: every byte
// arrives once, in order, and the copier ends at end of file.
func TestCopyOutput(t *testing.T) {
	t.Parallel()
	data := bytes.Repeat([]byte("0123456789abcdefghijklmnopqrstuvwxyz"), 30000)
	pieces := []int{1, 100, 1023, 1024, 4096, 5000, 32 << 10, 70 << 10}
	for _, tc := range []struct {
		name string
		open func(t *testing.T) (r, w *os.File)
	}{{"pipe", openPipe}, {"pty", openPTY}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, w := tc.open(t)
			var out sandboxtest.SyncBuffer
			done := make(chan struct{})
			go func() {
				defer close(done)
				defer r.Close()
				copyOutput(r, &out)
			}()
			for i, off := 0, 0; off < len(data); i++ {
				n := min(pieces[i%len(pieces)], len(data)-off)
				if _, err := w.Write(data[off : off+n]); err != nil {
					t.Fatal(err)
				}
				off += n
			}
			waitLen(t, &out, len(data))
			w.Close()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("the copier did not end at end of file")
			}
			if out.String() != string(data) {
				t.Fatal("the output differs from what was written")
			}
		})
	}
}

// TestCopyOutputIdleHoldsNoBuffer: readers that copied a burst and now
// wait for more hold no read buffer; before, each kept one of up to
// maxReadBuf.
func TestCopyOutputIdleHoldsNoBuffer(t *testing.T) {
	const readers = 100
	var wg sync.WaitGroup
	var writers []*os.File
	outs := make([]sandboxtest.SyncBuffer, readers)
	burst := bytes.Repeat([]byte("x"), 64<<10)
	before := heapInUse()
	for i := range readers {
		r, w := openPipe(t)
		writers = append(writers, w)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer r.Close()
			copyOutput(r, &outs[i])
		}()
		if _, err := w.Write(burst); err != nil {
			t.Fatal(err)
		}
	}
	for i := range outs {
		waitLen(t, &outs[i], len(burst))
	}
	for i := range outs {
		outs[i] = sandboxtest.SyncBuffer{} // the writers' own memory is not the readers'
	}
	held := int64(heapInUse()) - int64(before)
	for _, w := range writers {
		w.Close()
	}
	wg.Wait()
	if perReader := held / readers; perReader > 4<<10 {
		t.Fatalf("an idle reader holds %d bytes of heap, want at most 4 KiB", perReader)
	}
}

// heapInUse is the heap in use after a collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC() // a second one empties sync.Pools too
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// TestRawReadsOnlyOnNonBlockingDescriptors: the copiers' raw reads
// would hold a P in a read that blocks, so a descriptor in blocking mode
// is read the blocking way, and still copied whole.
func TestRawReadsOnlyOnNonBlockingDescriptors(t *testing.T) {
	t.Parallel()
	nb, _ := openPipe(t)
	defer nb.Close()
	if _, ok := polledRaw(nb); !ok {
		t.Fatal("a pipe of os.Pipe (non-blocking) is not read raw")
	}
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	r, w := os.NewFile(uintptr(fds[0]), "r"), os.NewFile(uintptr(fds[1]), "w")
	defer r.Close()
	if _, ok := polledRaw(r); ok {
		t.Fatal("a blocking pipe would be read raw")
	}
	var out sandboxtest.SyncBuffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		copyOutput(r, &out)
	}()
	w.Write([]byte("every byte"))
	w.Close()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the copier did not end at end of file")
	}
	if out.String() != "every byte" {
		t.Fatalf("copied %q", out.String())
	}
}

// TestHeadCaptureLetsGoOnceFull: the setup message is what the first
// headSize bytes of output hold, whatever the writes' sizes, and once they
// all came the capture keeps that line alone, not the bytes.
func TestHeadCaptureLetsGoOnceFull(t *testing.T) {
	t.Parallel()
	filler := strings.Repeat("output of the command\r\n", 200) // 4,600 bytes
	for _, tc := range []struct{ name, out, want string }{
		{"message first", "bwrap: Can't mount proc on /newroot/proc\n" + filler, "bwrap: Can't mount proc on /newroot/proc"},
		{"init's message", "termgate-init: control socket: EOF\r\n" + filler, "termgate-init: control socket: EOF"},
		{"none", filler, ""},
		{"message past the head", filler[:headSize] + "bwrap: too late\n", ""},
		{"message cut at the head's end", filler[:headSize-10] + "\nbwrap: a long message\n", "bwrap: a "},
		{"short output", "bwrap: Creating new namespace failed\n", "bwrap: Creating new namespace failed"},
		{"nothing", "", ""},
	} {
		for _, size := range []int{1, 7, 100, 2047, 2048, 5000} {
			var h headCapture
			for rest := tc.out; rest != ""; {
				n := min(size, len(rest))
				if m, err := h.Write([]byte(rest[:n])); m != n || err != nil {
					t.Fatalf("%s, writes of %d: Write = %d, %v", tc.name, size, m, err)
				}
				rest = rest[n:]
			}
			if got := h.setupMessage(); got != tc.want {
				t.Errorf("%s, writes of %d: setup message %q, want %q", tc.name, size, got, tc.want)
			}
			if len(tc.out) >= headSize && h.buf != nil {
				t.Errorf("%s, writes of %d: %d bytes of output kept once the head was full", tc.name, size, len(h.buf))
			}
		}
	}
}
