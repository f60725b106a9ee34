package main

import (
	"context"
	"encoding/json"
	"os"
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

// BenchmarkClients: the Go client, @termgate/client under Node and the
// Python SDK (asyncio) each read the same 100 MiB of terminal output from
// one serve, one after the other in one run, and then each holds 40 idle
// attached terminals. It reports each one's rate, its share of the Go
// client's, and its memory per idle session (RSS for Node and Python,
// heap and stacks for Go, each measured in its own process).
func BenchmarkClients(b *testing.B) {
	g := startGateway(b, "--max-running-per-tenant", "64", "--max-running", "256", "--starts-per-minute", "100000", "--max-conns-per-subject", "64", "--max-channels", "64")
	tok := g.token(b, "acme", allScopes)
	web, _ := filepath.Abs(filepath.Join("..", "..", "web", "client", "src", "index.js"))
	node, _ := filepath.Abs(filepath.Join("testdata", "clients-bench.mjs"))
	pyScript, _ := filepath.Abs(filepath.Join("testdata", "clients_bench.py"))
	venv := pythonSDK(b)
	for b.Loop() {
		goRate, goIdle := benchGoClient(b, g.url, tok)
		b.ReportMetric(goRate, "go-MB/s")
		b.ReportMetric(goIdle, "go-idle-KiB")
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

// benchGoClient is the Go client's rate reading benchPTYCommand's output,
// and the heap and stacks one idle attached session costs it.
func benchGoClient(b *testing.B, url, tok string) (rate, idleKiB float64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, client.Config{URL: url, Token: func(context.Context) (string, error) { return tok, nil }})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	e, err := c.Start(ctx, wire.Request{Command: "/bin/sh", Args: []string{"-c", benchPTYCommand}, PTY: &wire.Size{Rows: 24, Cols: 80}})
	if err != nil {
		b.Fatal(err)
	}
	var n int64
	for {
		ev, err := e.Next(ctx)
		if err != nil {
			b.Fatal(err)
		}
		n += int64(len(ev.Data))
		if ev.Kind == "exit" {
			break
		}
	}
	rate = float64(n) / 1e6 / time.Since(start).Seconds()
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
	return rate, idleKiB
}

// pythonSDK installs gateway/client/python into a virtual environment over
// Debian's packages, as TestPythonSDK does, and returns its directory.
func pythonSDK(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "python")
	venv := filepath.Join(dir, "venv")
	for _, args := range [][]string{
		{"cp", "-r", filepath.Join("..", "..", "gateway", "client", "python"), src},
		{"/usr/bin/python3", "-m", "venv", "--system-site-packages", venv},
		{filepath.Join(venv, "bin", "pip"), "install", "--quiet", "--no-index", "--no-build-isolation", src},
	} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%q: %v %s", args, err, out)
		}
	}
	os.RemoveAll(src)
	return venv
}
