//go:build linux

package sandbox

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/internal/seccomp"
	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// firstByte records when output first arrives.
type firstByte struct {
	once sync.Once
	at   time.Time
}

func (f *firstByte) Write(b []byte) (int, error) {
	f.once.Do(func() { f.at = time.Now() })
	return len(b), nil
}

var benchPolicy = Policy{Command: []string{"/bin/echo", "x"}}

// BenchmarkStart measures Start to first output byte and to exit of a
// trivial command, beside plain bwrap run with the same arguments and
// descriptors: the difference is termgate's own overhead (cgroup, process
// events, descriptor setup, output copying).
func BenchmarkStart(b *testing.B) {
	l := needLauncher(b)
	p := benchPolicy
	p.Workspace = sandboxtest.Dir(b)
	b.Run("termgate", func(b *testing.B) {
		var first time.Duration
		for b.Loop() {
			var fb firstByte
			start := time.Now()
			proc, err := l.Start(context.Background(), p, Stdio{Stdout: &fb})
			if err != nil {
				b.Fatal(err)
			}
			if exit := proc.Wait(); !exit.Success() {
				b.Fatal(exit)
			}
			first += fb.at.Sub(start)
		}
		b.ReportMetric(float64(first.Microseconds())/float64(b.N)/1000, "ms-first-byte/op")
	})
	b.Run("bwrap", func(b *testing.B) {
		np := p.Normalize()
		var first time.Duration
		for b.Loop() {
			start := time.Now()
			at, err := plainBwrap(l, np)
			if err != nil {
				b.Fatal(err)
			}
			first += at.Sub(start)
		}
		b.ReportMetric(float64(first.Microseconds())/float64(b.N)/1000, "ms-first-byte/op")
	})
}

// plainBwrap runs bwrap with the plan termgate would use, but running the
// command itself with bwrap's own --setenv instead of termgate's init, and
// without a cgroup, process events or supervision; it returns when output
// first arrived.
func plainBwrap(l *Launcher, p Policy) (time.Time, error) {
	pl := buildPlan(p, l.layout, seccomp.Program())
	for _, kv := range p.sortedEnv() {
		k, v, _ := strings.Cut(kv, "=")
		pl.opts = append(pl.opts, "--setenv", k, v)
	}
	pl.argv = append([]string{"--"}, p.Command...)
	files, err := l.openFiles(pl, p)
	if err != nil {
		return time.Time{}, err
	}
	defer closeAll(files)
	argsR, argsW, err := os.Pipe()
	if err != nil {
		return time.Time{}, err
	}
	defer argsR.Close()
	argsW.Write(encodeArgs(pl.opts))
	argsW.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		return time.Time{}, err
	}
	defer outR.Close()
	// No control socket: the command does not read one.
	req := spawnRequest{path: l.bwrap, args: append([]string{"bwrap", "--args", fmt.Sprint(argsFD)}, pl.argv...),
		files: append([]*os.File{nil, outW, outW, nil, argsR}, files...)}
	if id, _ := l.identityFor(p); id.switchTo {
		req.cred = &syscall.Credential{Uid: id.uid, Gid: id.gid, Groups: []uint32{}}
	}
	cmd := execCommand(req)
	if err := cmd.Start(); err != nil {
		outW.Close()
		return time.Time{}, err
	}
	outW.Close()
	var fb firstByte
	io.Copy(&fb, outR)
	return fb.at, cmd.Wait()
}

// ptyBenchBytes is what BenchmarkPTYThroughput's command prints.
const ptyBenchBytes = 32 << 20

// BenchmarkPTYThroughput measures a PTY's output read into a 1 MiB
// circular buffer, as a ring keeps it: copied from the copier's own buffer
// by Write ("write"), or read straight into the buffer's memory through a
// reservation ("reserve").
func BenchmarkPTYThroughput(b *testing.B) {
	l := needLauncher(b)
	p := Policy{Command: sh(fmt.Sprintf("stty raw -echo; head -c %d /dev/zero", ptyBenchBytes)), Workspace: sandboxtest.Dir(b), TTY: &WindowSize{Rows: 24, Cols: 80}}
	for _, v := range []struct {
		name string
		out  func(*circular) io.Writer
	}{{"write", func(c *circular) io.Writer { return writeOnly{c} }}, {"reserve", func(c *circular) io.Writer { return c }}} {
		b.Run(v.name, func(b *testing.B) {
			b.SetBytes(ptyBenchBytes)
			events := 0
			for b.Loop() {
				c := &circular{buf: make([]byte, 1<<20)}
				proc, err := l.Start(context.Background(), p, Stdio{Stdout: v.out(c)})
				if err != nil {
					b.Fatal(err)
				}
				if exit := proc.Wait(); !exit.Success() || c.total != ptyBenchBytes {
					b.Fatalf("%s, %d bytes", exit, c.total)
				}
				events += c.events
			}
			b.ReportMetric(float64(b.N)*ptyBenchBytes/float64(events), "B/event")
		})
	}
}

// circular keeps the last bytes written in a fixed buffer, as a ring does.
type circular struct {
	buf    []byte
	off    int // where the next event starts
	total  int
	events int
}

func (c *circular) Write(b []byte) (int, error) {
	for len(b) > 0 {
		dst := c.Reserve(min(len(b), len(c.buf)))
		n := copy(dst, b)
		c.Commit(n)
		b = b[n:]
	}
	return 0, nil
}

func (c *circular) Reserve(n int) []byte {
	if c.off+n > len(c.buf) {
		c.off = 0
	}
	return c.buf[c.off : c.off+n]
}

func (c *circular) Commit(n int) error {
	c.off += n
	c.total += n
	c.events++
	return nil
}

// writeOnly hides a circular's Reserver.
type writeOnly struct{ c *circular }

func (w writeOnly) Write(b []byte) (int, error) { return w.c.Write(b) }
