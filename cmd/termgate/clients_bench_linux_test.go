package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/termgate/termgate/gateway/client"
	"github.com/termgate/termgate/gateway/wire"
)

// benchPTYCommand writes 100 MiB of base64 text (76 columns a line) to
// the terminal.
const benchPTYCommand = "head -c 78643200 /dev/zero | base64"

// benchIdleSessions are the idle attached sessions each client holds to
// measure what one costs it.
const benchIdleSessions = 40

// BenchmarkClients: the Go client (termgate run --pty), @termgate/client
// under Node and the Python SDK (asyncio), each in a process of its own,
// read the same 100 MiB of terminal output from one serve, one after the
// other in one run, and then each holds 40 idle
// attached terminals. It reports each one's rate, its share of the Go
// client's, and its memory per idle session: heap and stacks for Go, the
// JS heap and its buffers for Node, RSS for Python, each in its own
// process.
func BenchmarkClients(b *testing.B) {
	g := startGateway(b, "--max-running-per-tenant", "64", "--max-running", "256", "--starts-per-minute", "100000", "--max-conns-per-subject", "64", "--max-channels", "64")
	tok := g.token(b, "acme", allScopes)
	web, _ := filepath.Abs(filepath.Join("..", "..", "web", "client", "src", "index.js"))
	node, _ := filepath.Abs(filepath.Join("testdata", "clients-bench.mjs"))
	pyScript, _ := filepath.Abs(filepath.Join("testdata", "clients_bench.py"))
	venv, _ := installPythonSDK(b)
	bin := filepath.Join(b.TempDir(), "termgate")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v %s", err, out)
	}
	for b.Loop() {
		// The Go client reads in a process of its own, as the others do:
		// termgate run --pty, its output discarded.
		start := time.Now()
		run := exec.Command(bin, "run", "--pty", "--url", g.url, "--token", tok, "--", "/bin/sh", "-c", benchPTYCommand)
		var n countWriter
		run.Stdout = &n
		if err := run.Run(); err != nil || n < 100<<20 {
			b.Fatalf("termgate run: %v, %d bytes", err, n)
		}
		goRate := float64(n) / 1e6 / time.Since(start).Seconds()
		b.ReportMetric(goRate, "go-MB/s")
		b.ReportMetric(benchGoIdle(b, g.url, tok), "go-idle-KiB")
		for _, c := range []struct {
			name string
			cmd  []string
		}{
			{"node", []string{"node", "--experimental-websocket", "--no-warnings", "--expose-gc", node, web, g.url, tok, benchPTYCommand, strconv.Itoa(benchIdleSessions)}},
			{"python", []string{filepath.Join(venv, "bin", "python"), pyScript, g.url, tok, benchPTYCommand, strconv.Itoa(benchIdleSessions)}},
		} {
			out, err := exec.Command(c.cmd[0], c.cmd[1:]...).Output()
			var r struct {
				Bytes   int64
				MS      float64
				IdleKiB float64
			}
			if err != nil || json.Unmarshal(out, &r) != nil || r.Bytes < 100<<20 {
				b.Fatalf("%s: %v %s", c.name, err, out)
			}
			rate := float64(r.Bytes) / 1e6 / (r.MS / 1000)
			b.ReportMetric(rate, c.name+"-MB/s")
			b.ReportMetric(100*rate/goRate, c.name+"-%-of-go")
			b.ReportMetric(r.IdleKiB, c.name+"-idle-KiB")
		}
	}
}

// countWriter counts what is written to it.
type countWriter int64

func (c *countWriter) Write(p []byte) (int, error) { *c += countWriter(len(p)); return len(p), nil }

// benchGoIdle is the heap and stacks one idle attached terminal costs the
// Go client.
func benchGoIdle(b *testing.B, url, tok string) (idleKiB float64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, client.Config{URL: url, Token: func(context.Context) (string, error) { return tok, nil }})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	inUse := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapInuse + ms.StackInuse
	}
	before := inUse()
	var idle []*client.Execution
	for range benchIdleSessions {
		e, err := c.Start(ctx, wire.Request{Command: "/bin/sh", Args: []string{"-c", "sleep 120"}, PTY: &wire.Size{Rows: 24, Cols: 80}})
		if err != nil {
			b.Fatal(err)
		}
		idle = append(idle, e)
	}
	time.Sleep(500 * time.Millisecond)
	idleKiB = float64(inUse()-before) / 1024 / benchIdleSessions
	for _, e := range idle {
		e.Cancel(ctx)
	}
	return idleKiB
}
