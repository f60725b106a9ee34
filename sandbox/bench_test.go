//go:build linux

package sandbox

import (
	"context"
	"io"
	"os"
	"strings"
	"sync"
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
	cmd := l.command(p, pl, [3]*os.File{nil, outW, outW}, append([]*os.File{nil, argsR}, files...))
	if err := cmd.Start(); err != nil {
		outW.Close()
		return time.Time{}, err
	}
	outW.Close()
	var fb firstByte
	io.Copy(&fb, outR)
	return fb.at, cmd.Wait()
}
