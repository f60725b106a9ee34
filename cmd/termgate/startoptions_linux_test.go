package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// post sends body as JSON to the gateway with tok and returns the
// status and the answer.
func (g gatewayUnderTest) post(t *testing.T, tok, path string, body any) (int, []byte) {
	t.Helper()
	b, _ := json.Marshal(body)
	return g.request(t, tok, http.MethodPost, path, bytes.NewReader(b))
}

func (g gatewayUnderTest) request(t *testing.T, tok, method, path string, body io.Reader) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, g.url+path, body)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, answer
}

// execText runs an agent exec that must answer 201 and returns its result.
func (g gatewayUnderTest) execText(t *testing.T, tok string, body wire.ExecRequest) wire.ExecResult {
	t.Helper()
	status, b := g.post(t, tok, "/v1/exec", body)
	var res wire.ExecResult
	if status != http.StatusCreated || json.Unmarshal(b, &res) != nil || res.Exit == nil {
		t.Fatalf("exec %+v: %d %s", body, status, b)
	}
	return res
}

// TestStartOptionsTakeEffect: each start option, asked on the wire, is
// what the sandbox gets: a read-only workspace refuses a write, the
// operator's mounts are there (read-only unless declared :rw), proc
// self-exe shows only /proc/self/exe, the result keeps the output
// budget asked and is dropped after the retention asked; options out of
// the server's bounds are refused naming the bound, and the same id with
// other options is a conflict.
func TestStartOptionsTakeEffect(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	data, scratch := filepath.Join(dir, "data"), filepath.Join(dir, "scratch")
	os.Mkdir(data, 0o755)
	os.Mkdir(scratch, 0o777)
	os.Chmod(scratch, 0o777)
	os.WriteFile(filepath.Join(data, "hello.txt"), []byte("from the host\n"), 0o644)
	g := startGateway(t, "--mount", "data="+data, "--mount", "scratch="+scratch+":rw", "--max-retention", "1h", "--max-output-budget", "4K")
	tok := g.token(t, "acme", allScopes)

	res := g.execText(t, tok, wire.ExecRequest{Command: "touch /workspace/x 2>&1; echo $?", WorkspaceReadOnly: true})
	if !strings.Contains(res.Output, "Read-only file system") || !strings.HasSuffix(res.Output, "1\n") {
		t.Errorf("a read-only workspace: %q", res.Output)
	}
	res = g.execText(t, tok, wire.ExecRequest{Command: "cat /mnt/data/hello.txt; touch /mnt/data/y 2>&1; echo made > /mnt/scratch/z && echo ok", Mounts: []string{"data", "scratch"}})
	if !strings.HasPrefix(res.Output, "from the host\n") || !strings.Contains(res.Output, "Read-only file system") || !strings.HasSuffix(res.Output, "ok\n") {
		t.Errorf("mounts: %q", res.Output)
	}
	if b, _ := os.ReadFile(filepath.Join(scratch, "z")); string(b) != "made\n" {
		t.Errorf("the writable mount on the host holds %q", b)
	}
	res = g.execText(t, tok, wire.ExecRequest{Argv: []string{"/bin/sh", "-c", "readlink /proc/self/exe; ls /proc"}, Proc: "self-exe"})
	if res.Output != "/bin/sh\nself\n" {
		t.Errorf("proc self-exe: %q", res.Output)
	}
	// No procfs: not even pid 1 (a race build's init reads its own
	// executable through a /proc/self/exe link, so /proc may exist).
	res = g.execText(t, tok, wire.ExecRequest{Command: "test -e /proc/1 && echo procfs || echo none", Proc: "none"})
	if res.Output != "none\n" {
		t.Errorf("proc none: %q", res.Output)
	}
	res = g.execText(t, tok, wire.ExecRequest{Command: "test -e /proc/1 && echo procfs || echo none", Proc: "private"})
	if res.Output != "procfs\n" {
		t.Errorf("proc private: %q", res.Output)
	}

	status, b := g.post(t, tok, "/v1/executions", map[string]any{"id": "budget", "command": "/bin/sh", "args": []string{"-c", "seq 1 10000"}, "max_output_bytes": 1000, "retention_ms": 1500})
	if status != http.StatusCreated {
		t.Fatalf("start: %d %s", status, b)
	}
	var info struct {
		Result *struct {
			Stdout struct {
				RetainedBytes int `json:"retained_bytes"`
				OmittedBytes  int `json:"omitted_bytes"`
			} `json:"stdout"`
		} `json:"result"`
	}
	sandboxtest.Eventually(t, 30*time.Second, func() bool {
		_, b = g.request(t, tok, http.MethodGet, "/v1/executions/budget", nil)
		return json.Unmarshal(b, &info) == nil && info.Result != nil
	})
	if info.Result == nil || info.Result.Stdout.RetainedBytes > 1000 || info.Result.Stdout.RetainedBytes+info.Result.Stdout.OmittedBytes != 48894 {
		t.Errorf("the result's budget: %s", b)
	}
	if !sandboxtest.Eventually(t, 30*time.Second, func() bool {
		status, _ = g.request(t, tok, http.MethodGet, "/v1/executions/budget", nil)
		return status == http.StatusNotFound
	}) {
		t.Errorf("retention 1.5 s: still there")
	}

	for _, c := range []struct {
		body any
		code string
		says string
	}{
		{map[string]any{"command": "true", "mounts": []string{"etc"}}, wire.CodeInvalidSpec, "it offers data, scratch"},
		{map[string]any{"command": "true", "mounts": []string{"data", "data"}}, wire.CodeInvalidSpec, "twice"},
		{map[string]any{"command": "true", "proc": "all"}, wire.CodeInvalidSpec, "proc must be"},
		{map[string]any{"command": "true", "retention_ms": 3_600_001}, wire.CodeInvalidSpec, "--max-retention"},
		{map[string]any{"command": "true", "result_max_output_bytes": 4097}, wire.CodeInvalidSpec, "--max-output-budget"},
	} {
		status, b := g.post(t, tok, "/v1/exec", c.body)
		var e struct{ Error, Message string }
		json.Unmarshal(b, &e)
		if status != http.StatusBadRequest || e.Error != c.code || !strings.Contains(e.Message, c.says) {
			t.Errorf("%v: %d %s, want %s saying %q", c.body, status, b, c.code, c.says)
		}
	}
	g.execText(t, tok, wire.ExecRequest{ID: "same", Command: "true"})
	if status, b := g.post(t, tok, "/v1/exec", wire.ExecRequest{ID: "same", Command: "true", WorkspaceReadOnly: true}); status != http.StatusConflict {
		t.Errorf("the same id with other options: %d %s", status, b)
	}
}

// TestStartProcWithinTheServers: a server with --proc none refuses a
// start that asks to see more, naming its flag.
func TestStartProcWithinTheServers(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "--proc", "none")
	tok := g.token(t, "acme", allScopes)
	status, b := g.post(t, tok, "/v1/exec", wire.ExecRequest{Command: "true", Proc: "private"})
	if status != http.StatusForbidden || !strings.Contains(string(b), "--proc none") {
		t.Errorf("proc private under --proc none: %d %s", status, b)
	}
	g.execText(t, tok, wire.ExecRequest{Command: "true", Proc: "none"})
}

// TestParseMounts: --mount takes NAME=HOSTPATH[:ro|:rw] of an existing,
// clean, absolute directory or file that is no symlink, each name once.
func TestParseMounts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	os.Symlink(dir, filepath.Join(dir, "link"))
	got, err := parseMounts([]string{"data=" + dir, "out=" + dir + ":rw", "ro-1=" + dir + ":ro"})
	if err != nil || got["data"].Writable || !got["out"].Writable || got["ro-1"].Writable || got["out"].Path != dir {
		t.Fatalf("%+v %v", got, err)
	}
	for _, bad := range []string{"Data=" + dir, "data", "=" + dir, "data=rel/path", "data=" + dir + "/../x", "data=" + filepath.Join(dir, "link"),
		"data=" + filepath.Join(dir, "missing"), "data=/dev/null", strings.Repeat("a", 33) + "=" + dir} {
		if _, err := parseMounts([]string{bad}); err == nil {
			t.Errorf("--mount %q was taken", bad)
		}
	}
	if _, err := parseMounts([]string{"a=" + dir, "a=" + dir + ":rw"}); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("a name declared twice: %v", err)
	}
}
