package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/session"
)

// idleSettle is how long the idle benchmarks let sessions be before they
// measure: past the sandbox's 5 s after which an output copier with
// nothing to read gives its goroutine up, as a session idle for minutes
// has.
const idleSettle = 6 * time.Second

// envAttachClients makes the test binary a client process that attaches
// idle connections (runAttachRole): "url token prefix n".
const envAttachClients = "TERMGATE_BENCH_ATTACH"

// envHeapProfile, when set, names a file for a heap profile taken while
// the connections are attached (and FILE.goroutines for their stacks).
const envHeapProfile = "TERMGATE_BENCH_HEAPPROFILE"

// BenchmarkIdleAttachedConnections measures what the gateway holds for
// an attached idle session, with executions in memory and durable ones
// (serve's default: a keeper forks the sandboxes). idleConns PTY shells
// are started first, then another process (so that its clients' memory
// is not counted) attaches one connection to each. Reports the Go heap
// and stacks of a whole session, execution and connection (B/session),
// and the connection's share alone (B/conn, B-stacks/conn), the
// executions' stacks (B-stacks/execution), VmRSS
// (kB-rss/conn) and goroutines, then the VmRSS left once every
// connection closed: at once and after a forced return of free memory to
// the OS (kB-rss-closed, kB-rss-freed, per connection). A parked
// connection holds no goroutine and no stack, so the stack figures are
// the runtime's stack spans moving, a few hundred bytes either way, and
// may be negative.
func BenchmarkIdleAttachedConnections(b *testing.B) {
	const n = 200
	for _, durable := range []bool{false, true} {
		b.Run(map[bool]string{false: "memory", true: "durable"}[durable], func(b *testing.B) {
			sc := session.Config{}
			if durable {
				sc, _ = durableSession(b)
			} else {
				sc.Launcher = session.SandboxLauncher(needLauncher(b))
			}
			sc.MaxRunning, sc.MaxRunningPerOwner, sc.MaxRetained, sc.MaxRetainedPerOwner = 2*n, 2*n, 2*n, 2*n
			e := newEnvSession(b, sc, func(c *Config) { c.StartsPerMinute, c.MaxConnsPerSubject = 1<<20, 2*n })
			round := 0
			for b.Loop() {
				round++
				benchIdleAttached(b, e, fmt.Sprintf("attach-%d-", round), n)
			}
		})
	}
}

func benchIdleAttached(b *testing.B, e *testEnv, prefix string, n int) {
	heapEmpty, stacksEmpty := memSplit()
	startIdleShells(b, e, prefix, n, 8)
	time.Sleep(idleSettle) // every shell reached its prompt and went idle
	heap0, stacks0 := memSplit()
	rss0, g0 := vmRSS(), runtime.NumGoroutine()
	stop := attachClients(b, e, prefix, n)
	time.Sleep(idleSettle) // the prompts are written, the writers and copiers idle
	heap1, stacks1 := memSplit()
	rss1, g1 := vmRSS(), runtime.NumGoroutine()
	writeProfiles(b, os.Getenv(envHeapProfile))
	stop()
	waitGoroutines(b, g0, 10*time.Second)
	memUse()
	rss2 := vmRSS()
	debug.FreeOSMemory()
	rss3 := vmRSS()
	per := float64(n)
	b.ReportMetric(float64(heap1+stacks1-heapEmpty-stacksEmpty)/per, "B/session")
	b.ReportMetric(float64(heap1+stacks1-heap0-stacks0)/per, "B/conn")
	b.ReportMetric(float64(stacks1-stacks0)/per, "B-stacks/conn")
	b.ReportMetric(float64(stacks0-stacksEmpty)/per, "B-stacks/execution")
	b.ReportMetric(float64(rss1-rss0)/per, "kB-rss/conn")
	b.ReportMetric(float64(g1-g0)/per, "goroutines/conn")
	b.ReportMetric(float64(rss2-rss0)/per, "kB-rss-closed/conn")
	b.ReportMetric(float64(rss3-rss0)/per, "kB-rss-freed/conn")
	endShells(b, e, prefix)
}

// attachClients starts a client process that attaches one connection to
// each of the n executions prefix0..prefix(n-1) and returns once all are
// attached. stop closes them and waits for the process.
func attachClients(b *testing.B, e *testEnv, prefix string, n int) (stop func()) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envAttachClients+"="+strings.Join([]string{e.url(), e.token(b, "bench", allScopes...), prefix, strconv.Itoa(n)}, " "))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	stop = func() {
		in.Close()
		if err := cmd.Wait(); err != nil {
			b.Errorf("attach clients: %v", err)
		}
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if line != "attached\n" {
		stop()
		b.Fatalf("attach clients: %q %v", line, err)
	}
	return stop
}

// runAttachRole is the client process of attachClients, when the
// environment says so: it attaches, says "attached", keeps reading until
// its standard input ends, then closes every connection; TestMain then
// exits.
func runAttachRole() {
	args := strings.Fields(os.Getenv(envAttachClients))
	if len(args) != 4 {
		return
	}
	n, _ := strconv.Atoi(args[3])
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	conns := make([]*websocket.Conn, 0, n)
	for i := range n {
		ws, err := attachIdle(ctx, args[0], args[1], fmt.Sprint(args[2], i))
		if err != nil {
			fmt.Fprintln(os.Stderr, "attach:", err)
			os.Exit(1)
		}
		conns = append(conns, ws)
	}
	for _, ws := range conns {
		go func() { // reads on: pongs, and any output
			for {
				if _, _, err := ws.Read(ctx); err != nil {
					return
				}
			}
		}()
	}
	fmt.Println("attached")
	io.Copy(io.Discard, os.Stdin)
	for _, ws := range conns {
		ws.Close(websocket.StatusNormalClosure, "")
	}
	os.Exit(0)
}

// attachIdle dials url and attaches to execution id, acknowledging, as
// termgate's own clients do.
func attachIdle(ctx context.Context, url, token, id string) (*websocket.Conn, error) {
	ws, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{Subprotocols: []string{wire.Subprotocol},
		HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}})
	if err != nil {
		return nil, err
	}
	b, _ := json.Marshal(wire.Request{Type: wire.TypeAttach, ID: id, Ack: true})
	if err := ws.Write(ctx, websocket.MessageText, b); err != nil {
		return nil, err
	}
	for {
		typ, m, err := ws.Read(ctx)
		if err != nil {
			return nil, err
		}
		if typ == websocket.MessageText && strings.Contains(string(m), `"`+wire.MsgAttached+`"`) {
			return ws, nil
		}
	}
}

// vmRSS is this process's resident set, kB.
func vmRSS() int64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

// waitGoroutines waits, at most d, until at most want goroutines run.
func waitGoroutines(b *testing.B, want int, d time.Duration) {
	deadline := time.Now().Add(d)
	for runtime.NumGoroutine() > want && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if g := runtime.NumGoroutine(); g > want {
		b.Logf("%d goroutines left over %d", g-want, want)
	}
}

// writeProfiles writes the heap profile to path and the goroutines to
// path.goroutines, when path is set.
func writeProfiles(b *testing.B, path string) {
	if path == "" {
		return
	}
	for name, file := range map[string]string{"heap": path, "goroutine": path + ".goroutines"} {
		f, err := os.Create(file)
		if err != nil {
			b.Fatal(err)
		}
		err = pprof.Lookup(name).WriteTo(f, map[string]int{"heap": 0, "goroutine": 1}[name])
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}
