package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/termgate/termgate/gateway/client"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// castUsage sums the size and count of the recordings whose file names
// start with prefix (all of them for "").
func castUsage(t *testing.T, dir, prefix string) (bytes int64, files int) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".cast") || !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		bytes += fi.Size()
		files++
	}
	return bytes, files
}

// recordedRuns runs recorded executions of tenant that print n bytes,
// until a start is refused (at most limit runs), and returns how many ran
// and what the refused run printed.
func recordedRuns(t *testing.T, g gatewayUnderTest, tenant string, n, limit int) (ran int, refusal string) {
	t.Helper()
	tok := g.token(t, tenant, allScopes)
	// Lines of 40 bytes written one at a time: a recording stops at the
	// first event past its bound, and these come in small reads.
	script := "i=0; while [ $i -lt " + strconv.Itoa(n/41) + " ]; do echo 0123456789012345678901234567890123456789; i=$((i+1)); done"
	for ran = 0; ran < limit; ran++ {
		code, out, stderr := runCLI(t, "", "run", "--url", g.url, "--token", tok, "--", "/bin/sh", "-c", script)
		if code != 0 {
			return ran, stderr
		}
		if len(out) != n/41*41 {
			t.Fatalf("%s's run %d printed %d bytes, want %d", tenant, ran, len(out), n)
		}
	}
	return ran, ""
}

// TestServeRecordingBudget: a tenant's recordings stop at its budget in
// bytes and in files, every tenant's at the server's, and a start that
// must be recorded past a budget is refused with the budget named, in the
// answer and in the audit trail; a restarted serve counts what is on disk.
func TestServeRecordingBudget(t *testing.T) {
	casts := t.TempDir()
	audit := filepath.Join(t.TempDir(), "audit.jsonl")
	flags := []string{"--recordings-dir", casts, "--record", "all", "--recording-max-size", "64K",
		"--recordings-max-bytes-per-tenant", "192K", "--recordings-max-files-per-tenant", "5",
		"--recordings-max-bytes", "1M", "--recordings-max-files", "12", "--audit-log", audit}
	g := startGateway(t, flags...)

	// acme's recordings are cut at 64K: a fourth could pass 192K.
	ran, refusal := recordedRuns(t, g, "acme", 100000, 10)
	bytes, files := castUsage(t, casts, "acme_")
	t.Logf("acme: %d recorded runs (%d bytes in %d files), then: %s", ran, bytes, files, strings.TrimSpace(refusal))
	if ran < 2 || ran > 4 || bytes > 192<<10 || files != ran {
		t.Errorf("acme ran %d recorded executions into %d bytes in %d files; want the 192K budget to refuse one after 2 to 4", ran, bytes, files)
	}
	acme := ran
	for _, want := range []string{"capacity", "recording budget", "tenant", "196608 bytes"} {
		if !strings.Contains(refusal, want) {
			t.Errorf("acme's refusal %q does not say %q", refusal, want)
		}
	}
	// globex's are small: its sixth is one file too many.
	ran, refusal = recordedRuns(t, g, "globex", 41, 10)
	if _, files := castUsage(t, casts, "globex_"); ran != 5 || files != 5 || !strings.Contains(refusal, "this tenant's recordings") || !strings.Contains(refusal, "5 files") {
		t.Errorf("globex ran %d recorded executions into %d files, then %q; want 5, then a refusal naming its 5 files", ran, files, refusal)
	}
	// initech has its whole budget, but the server has 12 files at most.
	ran, refusal = recordedRuns(t, g, "initech", 41, 10)
	if _, files := castUsage(t, casts, ""); ran != 12-acme-5 || files != 12 || !strings.Contains(refusal, "the server's recordings") {
		t.Errorf("initech ran %d recorded executions, %d files in all, then %q; want %d, 12, then a refusal naming the server's budget", ran, files, refusal, 12-acme-5)
	}
	trail, err := os.ReadFile(audit)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(trail), `"outcome":"refused","code":"capacity"`); n < 3 {
		t.Errorf("the audit trail holds %d refused starts with code capacity, want 3:\n%s", n, trail)
	}

	// What is on disk counts after a restart.
	g.stop()
	g = startGateway(t, flags...)
	for _, tenant := range []string{"acme", "globex", "initech"} {
		if ran, refusal := recordedRuns(t, g, tenant, 41, 1); ran != 0 || !strings.Contains(refusal, "recording budget") {
			t.Errorf("after a restart, %s ran %d recorded executions (%q); want its start refused", tenant, ran, refusal)
		}
	}
	// The HTTP API answers 429 capacity, with the same message.
	req, _ := http.NewRequestWithContext(t.Context(), "POST", g.url+"/v1/executions",
		strings.NewReader(`{"command":"/bin/sh","args":["-c","true"]}`))
	req.Header.Set("Authorization", "Bearer "+g.token(t, "acme", allScopes))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	t.Logf("POST /v1/executions: %s %s", resp.Status, body)
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(body), `"capacity"`) || !strings.Contains(string(body), "recording budget") {
		t.Errorf("POST /v1/executions past acme's recording budget: %s %s", resp.Status, body)
	}
	// A start that is not recorded is not refused.
	g.stop()
	g = startGateway(t, append(flags[:2:2], flags[4:]...)...)
	code, out, stderr := runCLI(t, "", "run", "--url", g.url, "--token", g.token(t, "acme", allScopes), "--", "/bin/sh", "-c", "echo unrecorded")
	if code != 0 || out != "unrecorded\n" {
		t.Errorf("an unrecorded run of acme: status %d, %q, %q", code, out, stderr)
	}
}

// TestServeRecordingRetention: recordings older than
// --recordings-retention are deleted, at startup and while serve runs,
// but never one still being written.
func TestServeRecordingRetention(t *testing.T) {
	casts := t.TempDir()
	old, fresh := filepath.Join(casts, "acme_old_aaaaaaaaaaaaaaaa.cast"), filepath.Join(casts, "acme_fresh_aaaaaaaaaaaaaaaa.cast")
	for _, p := range []string{old, fresh} {
		if err := os.WriteFile(p, []byte(`{"version":2,"width":80,"height":24,"timestamp":0}`+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chtimes(old, time.Now().Add(-2*time.Hour), time.Now().Add(-2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, "--recordings-dir", casts, "--record", "all", "--recordings-retention", "1h")
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("a recording 2h old outlived the startup of a serve with --recordings-retention 1h: %v", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("a fresh recording did not outlive the startup: %v", err)
	}
	g.stop()

	g = startGateway(t, "--recordings-dir", casts, "--record", "all", "--recordings-retention", "2s")
	tok := g.token(t, "globex", allScopes)
	// A quiet shell whose recording is being written: its file stops
	// changing after the header.
	owner, err := client.Dial(t.Context(), client.Config{URL: g.url, Token: func(context.Context) (string, error) { return tok, nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	e, err := owner.Start(t.Context(), wire.Request{ID: "quiet", Command: "/bin/sh", Args: []string{"-c", "sleep 600"}})
	if err != nil {
		t.Fatal(err)
	}
	e.Detach(t.Context())
	if code, _, stderr := runCLI(t, "", "run", "--url", g.url, "--token", tok, "--", "/bin/sh", "-c", "echo short"); code != 0 {
		t.Fatalf("run: %d %q", code, stderr)
	}
	_, files := castUsage(t, casts, "globex_")
	if files != 2 {
		t.Fatalf("%d recordings of globex, want 2", files)
	}
	sandboxtest.Eventually(t, 60*time.Second, func() bool {
		_, files = castUsage(t, casts, "globex_")
		return files < 2
	})
	if _, err := os.Stat(fresh); !os.IsNotExist(err) {
		t.Errorf("a recording older than --recordings-retention 2s outlived it: %v", err)
	}
	ents, _ := os.ReadDir(casts)
	if len(ents) != 1 || !strings.HasPrefix(ents[0].Name(), "globex_quiet_") {
		t.Errorf("left %v, want only the recording still being written", ents)
	}
}
