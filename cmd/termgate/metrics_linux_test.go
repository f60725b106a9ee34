package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// TestServeMetricsListen: --metrics-listen serves /metrics and pprof on a
// listener of its own; the public listener serves neither.
func TestServeMetricsListen(t *testing.T) {
	needBwrap(t)
	state := t.TempDir()
	os.Chmod(filepath.Dir(state), 0o711)
	os.Chmod(state, 0o711)
	t.Setenv("XDG_STATE_HOME", state)
	t.Run("memory", func(t *testing.T) { serveMetricsListen(t, "none") })
	// Durable: the sandbox reads output into the ring's file, counted too.
	t.Run("durable", func(t *testing.T) { serveMetricsListen(t, filepath.Join(state, "durable")) })
}

func serveMetricsListen(t *testing.T, stateDir string) {
	ctx, stop := context.WithCancel(t.Context())
	var out, errs sandboxtest.SyncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--dev", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
			"--cgroup-parent", sandboxtest.CgroupParent(t), "--state-dir", stateDir}, strings.NewReader(""), &out, &errs)
	}()
	defer func() {
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Error("serve did not stop")
		}
	}()
	public := regexp.MustCompile(`http://(127\.0\.0\.1:\d+)/#token=([\w.-]+)`)
	metrics := regexp.MustCompile(`metrics listening\W+addr\W+(127\.0\.0\.1:\d+)`)
	var pm, mm []string
	if !sandboxtest.Eventually(t, 30*time.Second, func() bool {
		pm, mm = public.FindStringSubmatch(out.String()), metrics.FindStringSubmatch(errs.String()+out.String())
		return pm != nil && mm != nil
	}) {
		t.Fatalf("no listening addresses; stdout %q, stderr %q", out.String(), errs.String())
	}
	get := func(addr, path string) (int, string) {
		t.Helper()
		c := &http.Client{Timeout: 20 * time.Second}
		resp, err := c.Get("http://" + addr + path)
		if err != nil {
			t.Fatalf("GET %s%s: %v", addr, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
		return resp.StatusCode, string(b)
	}
	if code, body := get(mm[1], "/metrics"); code != 200 || !strings.Contains(body, "termgate_executions_running 0") ||
		!strings.Contains(body, "go_goroutines") || !strings.Contains(body, "termgate_connections_open 0") {
		t.Errorf("metrics listener /metrics: %d %.300q", code, body)
	}
	startReal(t, pm[1], pm[2])
	var body string
	if !sandboxtest.Eventually(t, 60*time.Second, func() bool {
		_, body = get(mm[1], "/metrics")
		return strings.Contains(body, `termgate_executions_ended_total{reason="exited",status="exited"} 1`)
	}) {
		t.Fatalf("the execution never ended in the metrics: %.2000q", body)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^termgate_sandbox_start_seconds_count 1$`),
		regexp.MustCompile(`(?m)^termgate_sandbox_start_seconds_sum 0\.\d*[1-9]`), // a real start takes time
		regexp.MustCompile(`(?m)^termgate_sandbox_start_seconds_bucket\{le="\+Inf"\} 1$`),
		regexp.MustCompile(`(?m)^termgate_output_bytes_total 6$`), // "hello\n"
	} {
		if !want.MatchString(body) {
			t.Errorf("metrics after a real execution: no %s", want)
		}
	}
	if code, body := get(mm[1], "/debug/pprof/"); code != 200 || !strings.Contains(body, "goroutine") {
		t.Errorf("metrics listener /debug/pprof/: %d %.300q", code, body)
	}
	if _, body := get(pm[1], "/metrics"); strings.Contains(body, "termgate_executions_running") {
		t.Error("the public listener serves /metrics")
	}
	if _, body := get(pm[1], "/debug/pprof/goroutine?debug=1"); strings.Contains(body, "goroutine profile") {
		t.Error("the public listener serves /debug/pprof")
	}
}

// TestServeMetricsListenOffByDefault: without the flag nothing listens
// for metrics; a bad address is refused.
func TestServeMetricsListenOffByDefault(t *testing.T) {
	o, err := parseServe([]string{"--dev"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if ln, err := o.listenMetrics(); ln != nil || err != nil || o.metricsListen != "" {
		t.Fatalf("default: listener %v, %v, flag %q; want none", ln, err, o.metricsListen)
	}
	o.metricsListen = "127.0.0.1:99999"
	if ln, err := o.listenMetrics(); err == nil || !strings.Contains(err.Error(), "--metrics-listen") {
		if ln != nil {
			ln.Close()
		}
		t.Fatalf("bad address: %v, want an error naming --metrics-listen", err)
	}
}

// startReal starts a real sandbox that prints hello over the HTTP API of
// the server at addr.
func startReal(t *testing.T, addr, token string) {
	t.Helper()
	body := `{"id":"metrics","command":"/bin/sh","args":["-c","echo hello"]}`
	req, _ := http.NewRequestWithContext(t.Context(), "POST", "http://"+addr+"/v1/executions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		t.Fatalf("start: %s %s", resp.Status, b)
	}
}
