//go:build linux

package sandbox

import (
	"bytes"
	"io"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/termgate/termgate/sandbox/sandboxtest"
	"golang.org/x/sys/unix"
)

var _ Reserver = (*lendingWriter)(nil)

// TestCopyReserved drives the copier itself over a pipe and a PTY: pieces
// of every size, with and without pauses, arrive exactly once; a flood
// comes in events larger than the terminal's 4 KiB reads, through a PTY
// too (bursts of several reads); the head keeps the setup message.
func TestCopyReserved(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, 4<<20)
	for i := range data {
		data[i] = 'a' + byte(rng.IntN(26)) // no newline: a PTY would translate it
	}
	pieces := []int{1, 2, 100, 1023, 1024, 1025, 4096, 5000, 32 << 10, 70 << 10}
	for _, tc := range []struct {
		name  string
		open  func(t *testing.T) (r, w *os.File)
		burst bool
	}{{"pipe", openPipe, true}, {"pty", openPTY, true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, w := tc.open(t)
			var out lendingWriter
			var head headCapture
			done := make(chan struct{})
			go func() {
				defer close(done)
				defer r.Close()
				copyReserved(r, &out, &head)
			}()
			want := []byte("bwrap: Can't mount proc on /newroot/proc\n")
			w.Write(want)
			for i, off := 0, 0; off < len(data); i++ {
				n := min(pieces[i%len(pieces)], len(data)-off)
				if _, err := w.Write(data[off : off+n]); err != nil {
					t.Fatal(err)
				}
				off += n
			}
			want = append(want, data...)
			w.Close()
			<-done
			out.check(t, tc.name, string(want))
			if msg := head.setupMessage(); msg != "bwrap: Can't mount proc on /newroot/proc" {
				t.Errorf("setup message %q", msg)
			}
			if largest := maxOf(out.events); tc.burst && largest <= minReadBuf {
				t.Errorf("no burst: the largest event has %d bytes (%d events)", largest, len(out.events))
			}
		})
	}
}

func maxOf(xs []int) int {
	m := 0
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

func openPipe(t *testing.T) (*os.File, *os.File) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return r, w
}

// openPTY returns a pollable master and its slave in raw mode.
func openPTY(t *testing.T) (*os.File, *os.File) {
	master, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tty.Close() })
	tio, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err == nil {
		tio.Oflag &^= unix.OPOST
		err = unix.IoctlSetTermios(int(tty.Fd()), unix.TCSETS, tio)
	}
	if err != nil {
		t.Fatal(err)
	}
	m, err := pollable(master)
	if err != nil {
		t.Fatal(err)
	}
	return m, tty
}

// TestCopyReservedEndOfFile: a writer that closes at once, and one that
// writes just before closing, both end the copier, the second with its
// bytes.
func TestCopyReservedEndOfFile(t *testing.T) {
	t.Parallel()
	for _, last := range []string{"", "x", string(bytes.Repeat([]byte("y"), 3000))} {
		r, w := openPipe(t)
		w.Write([]byte(last))
		w.Close()
		var out lendingWriter
		copyReserved(r, &out, io.Discard)
		r.Close()
		out.check(t, "pipe", last)
	}
}

// TestCopyReservedKeystrokes: over a PTY, a keystroke's echo is its own
// event, committed at once rather than held for a burst.
func TestCopyReservedKeystrokes(t *testing.T) {
	t.Parallel()
	r, w := openPTY(t)
	var out lendingWriter
	done := copyReservedInBackground(r, &out)
	want := ""
	for i := range 20 {
		key := string(rune('a' + i))
		w.Write([]byte(key))
		want += key
		if !sandboxtest.Eventually(t, 10*time.Second, func() bool { return out.String() == want }) {
			t.Fatalf("keystroke %d: got %q", i, out.String())
		}
	}
	w.Close()
	<-done
	out.check(t, "pty", want)
	if len(out.events) != 20 {
		t.Errorf("20 keystrokes in %d events %v", len(out.events), out.events)
	}
}

// TestCopyReservedEndsAfterALastShortWrite: a short write and the hang-up
// that follows it at once, while the copier waits, still end it with every
// byte. The round after a short read asks the kernel before it waits: the
// wakeup those two made may be spent already.
func TestCopyReservedEndsAfterALastShortWrite(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"pipe", "pty"} {
		for i := range 50 {
			open := openPipe
			if kind == "pty" {
				open = openPTY
			}
			r, w := open(t)
			var out lendingWriter
			done := copyReservedInBackground(r, &out)
			w.Write([]byte("a"))
			if !sandboxtest.Eventually(t, 10*time.Second, func() bool { return out.String() == "a" }) {
				t.Fatalf("%s %d: the first byte never came: %q", kind, i, out.String())
			}
			w.Write([]byte("bc"))
			w.Close()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatalf("%s %d: the copier did not end within 10 s of the hang-up, after %q", kind, i, out.String())
			}
			out.check(t, kind, "abc")
		}
	}
}

// copyReservedInBackground runs copyReserved from r into out on a
// goroutine, and closes r and the channel it returns once that ended.
func copyReservedInBackground(r *os.File, out *lendingWriter) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer r.Close()
		copyReserved(r, out, io.Discard)
	}()
	return done
}
