package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/termgate/termgate/gateway/audit"
	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// auditServe is a `termgate serve --audit-log` on 127.0.0.1 whose
// output is kept, to be searched whole.
type auditServe struct {
	gatewayUnderTest
	audit     string
	out, errs *sandboxtest.SyncBuffer
	stop      func()
	done      chan error
}

func startAuditServe(t *testing.T, format string, extra ...string) *auditServe {
	t.Helper()
	needBwrap(t)
	dir := t.TempDir()
	os.Chmod(filepath.Dir(dir), 0o711)
	os.Chmod(dir, 0o711)
	secret := filepath.Join(dir, "secret")
	os.WriteFile(secret, []byte("a-test-secret-of-more-than-32-bytes-0123456789"), 0o600)
	os.Mkdir(filepath.Join(dir, "audit"), 0o700)
	s := &auditServe{audit: filepath.Join(dir, "audit", "audit.log"), out: &sandboxtest.SyncBuffer{}, errs: &sandboxtest.SyncBuffer{}, done: make(chan error, 1)}
	ctx, stop := context.WithCancel(context.Background())
	s.stop = stop
	args := append([]string{"serve", "--listen", "127.0.0.1:0", "--jwt-secret-file", secret, "--log-format", format,
		"--workspace-root", filepath.Join(dir, "ws"), "--cgroup-parent", sandboxtest.CgroupParent(t), "--state-dir", "none",
		"--audit-log", s.audit}, extra...)
	go func() { s.done <- run(ctx, args, strings.NewReader(""), s.out, s.errs) }()
	t.Cleanup(s.shutdown(t))
	addr := regexp.MustCompile(`"msg":"listening","addr":"(127\.0\.0\.1:\d+)"|msg=listening addr=(127\.0\.0\.1:\d+)`)
	var m []string
	sandboxtest.Eventually(t, 60*time.Second, func() bool {
		m = addr.FindStringSubmatch(s.errs.String())
		return m != nil || len(s.done) > 0
	})
	if m == nil {
		t.Fatalf("serve did not start: %s", s.errs.String())
	}
	s.gatewayUnderTest = gatewayUnderTest{url: "http://" + m[1] + m[2], secretFile: secret}
	return s
}

// shutdown stops serve once, and waits for it.
func (s *auditServe) shutdown(t *testing.T) func() {
	return func() {
		s.stop()
		select {
		case err := <-s.done:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
			s.done <- nil
		case <-time.After(60 * time.Second):
			t.Error("serve did not stop")
		}
	}
}

// call sends an HTTP API request with a raw Authorization value.
func (s *auditServe) call(t *testing.T, method, path, authz string, body any) (int, string) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, _ := http.NewRequestWithContext(t.Context(), method, s.url+path, r)
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	c := &http.Client{Timeout: 40 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b)
}

// records reads the whole trail, rotated files first.
func (s *auditServe) records(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, f := range audit.Files(s.audit, audit.MaxKeep) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Fatalf("%s: not a record: %q", f, sc.Text())
			}
			out = append(out, m)
		}
	}
	return out
}

func matching(recs []map[string]any, want map[string]any) []map[string]any {
	var out []map[string]any
next:
	for _, r := range recs {
		for k, v := range want {
			if r[k] != v {
				continue next
			}
		}
		out = append(out, r)
	}
	return out
}

// hostileArg holds a terminal title sequence, a colour, CR, LF and what
// looks like a record of its own.
const hostileArg = "\x1b]0;owned\x07\x1b[31m\r\n{\"event\":\"forged\",\"outcome\":\"ok\"}\r"

// TestServeAuditLog: serve --audit-log records a start with its command
// line, a cross-tenant attempt as refused, a refused token by reason
// only, and how the execution ended; and, in both log formats, nothing
// serve wrote (stdout, stderr, the trail) holds a token or a raw ESC or
// CR, nor a line the command forged.
func TestServeAuditLog(t *testing.T) {
	for _, format := range []string{"json", "text"} {
		t.Run(format, func(t *testing.T) {
			t.Parallel()
			s := startAuditServe(t, format, "--audit-max-size", "64K", "--audit-keep", "3")
			acme := s.token(t, "acme", allScopes)
			globex := s.token(t, "globex", allScopes)
			start := map[string]any{"id": "hostile", "command": "/bin/sh",
				"args": []string{"-c", `printf '\033[2J\033]0;t\007\r\n'; echo "$1" >/dev/null; exit 3`, "sh", hostileArg}}
			if code, body := s.call(t, "POST", "/v1/executions", "Bearer "+acme, start); code != 201 {
				t.Fatalf("start: %d %s", code, body)
			}
			if code, body := s.call(t, "POST", "/v1/executions", "Bearer "+acme, map[string]any{"command": "/bin/\x1b[2Jsh\r\n"}); code != 400 {
				t.Fatalf("a command off the list: %d %s", code, body)
			}
			if code, _ := s.call(t, "GET", "/v1/executions/hostile", "Bearer "+acme+"x", nil); code != 401 {
				t.Fatalf("a bad token: %d", code)
			}
			if code, body := s.call(t, "GET", "/v1/executions/hostile", "Bearer "+globex, nil); code != 404 {
				t.Fatalf("another tenant's execution: %d %s", code, body)
			}
			var ended []map[string]any
			if !sandboxtest.Eventually(t, 60*time.Second, func() bool {
				ended = matching(s.records(t), map[string]any{"event": "end", "execution": "hostile"})
				return len(ended) > 0
			}) {
				t.Fatalf("no end record; trail %v", s.records(t))
			}
			s.shutdown(t)()

			recs := s.records(t)
			st := matching(recs, map[string]any{"event": "start", "execution": "hostile", "outcome": "ok"})
			if len(st) != 1 || st[0]["tenant"] != "acme" || st[0]["via"] != "http" || fmt.Sprint(st[0]["argv"].([]any)[4]) != hostileArg {
				t.Errorf("start record %v: want the command line, escaped, as given", st)
			}
			if e := ended[0]; e["status"] != "exited" || e["exit_code"] != 3.0 || e["subject"] == nil {
				t.Errorf("end record %v", e)
			}
			if x := matching(recs, map[string]any{"event": "get", "tenant": "globex", "cross_tenant": true, "outcome": "refused", "code": "not_found"}); len(x) != 1 {
				t.Errorf("no refused cross-tenant record in %v", recs)
			}
			if u := matching(recs, map[string]any{"code": "unauthorized", "reason": "signature"}); len(u) != 1 || u[0]["tenant"] != nil {
				t.Errorf("refused token records %v: want one, by reason only", u)
			}
			if len(matching(recs, map[string]any{"event": "start", "code": "invalid_spec"})) != 1 {
				t.Errorf("no refused start record in %v", recs)
			}
			if len(matching(recs, map[string]any{"event": "forged"})) != 0 {
				t.Error("the command forged a record")
			}
			files := audit.Files(s.audit, audit.MaxKeep)
			written := map[string]string{"stdout": s.out.String(), "stderr": s.errs.String()}
			for _, f := range files {
				b, _ := os.ReadFile(f)
				written[f] = string(b)
				if fi, _ := os.Stat(f); fi.Mode().Perm() != 0o600 {
					t.Errorf("%s: mode %v, want 0600", f, fi.Mode().Perm())
				}
			}
			for name, w := range written {
				for _, tok := range []string{acme, globex} {
					if strings.Contains(w, tok) || strings.Contains(w, tok[strings.LastIndex(tok, ".")+1:]) {
						t.Errorf("%s holds a token", name)
					}
				}
				if i := strings.IndexAny(w, "\x1b\r\x07"); i >= 0 {
					t.Errorf("%s holds a raw control character at %d: %q", name, i, w[max(0, i-60):min(len(w), i+20)])
				}
			}
			if !strings.Contains(s.errs.String(), `audit_log`) {
				t.Error("the startup configuration does not name the audit log")
			}
		})
	}
}

// TestServeAuditLogRefusesUnsafePaths: serve does not start on an audit
// path that is a symlink, a device, or in a directory that is missing.
func TestServeAuditLogRefusesUnsafePaths(t *testing.T) {
	t.Parallel()
	needBwrap(t)
	dir := t.TempDir()
	link := filepath.Join(dir, "link")
	os.Symlink(filepath.Join(dir, "target"), link)
	for _, c := range []struct{ path, want string }{
		{link, "symlink"},
		{"/dev/full", "not a regular file"},
		{filepath.Join(dir, "missing", "audit.log"), "no such file"},
	} {
		code, _, stderr := runCLI(t, "", "serve", "--dev", "--listen", "127.0.0.1:0", "--state-dir", "none",
			"--cgroup-parent", sandboxtest.CgroupParent(t), "--audit-log", c.path)
		if code == 0 || !strings.Contains(stderr, c.want) {
			t.Errorf("--audit-log %s: status %d, stderr %q, want it to say %q", c.path, code, lastLine(stderr), c.want)
		}
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	return s[strings.LastIndex(s, "\n")+1:]
}

// TestServeAuditFlags: the audit flags, and their TERMGATE_* equivalents
// (flag > environment > default); a bad size or count is refused.
func TestServeAuditFlags(t *testing.T) {
	o, err := parseServe([]string{"--dev"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.audit.Path != "" || o.audit.Keep != audit.DefaultKeep {
		t.Errorf("defaults: %+v, want no trail and keep %d", o.audit, audit.DefaultKeep)
	}
	t.Setenv("TERMGATE_AUDIT_LOG", "/var/log/termgate/audit.log")
	t.Setenv("TERMGATE_AUDIT_MAX_SIZE", "1M")
	t.Setenv("TERMGATE_AUDIT_KEEP", "4")
	o, err = parseServe([]string{"--dev", "--audit-keep", "7"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.audit.Path != "/var/log/termgate/audit.log" || o.audit.MaxSize != 1<<20 || o.audit.Keep != 7 {
		t.Errorf("from the environment and a flag: %+v", o.audit)
	}
	for _, args := range [][]string{{"--audit-max-size", "lots"}, {"--audit-keep", "0"}, {"--audit-keep", "x"}} {
		if _, err := parseServe(append([]string{"--dev"}, args...), io.Discard); err == nil {
			t.Errorf("%q accepted", args)
		}
	}
}

// c1Hostile holds C1 controls (CSI, OSC, ST) and DEL, as UTF-8: a
// terminal that shows the trail or the log raw would act on them.
const c1Hostile = "\u009b2J\u009d0;owned\u009c\u007f\u0085\u009f"

// TestServeAuditLogEscapesC1: C1 controls and DEL in a command line, a
// token's subject and a request's execution ID reach the trail and
// serve's JSON log escaped (\u00XX), never as raw UTF-8, and read back
// as given.
func TestServeAuditLogEscapesC1(t *testing.T) {
	t.Parallel()
	s := startAuditServe(t, "json", "--log-level", "debug")
	code, out, stderr := runCLI(t, "", "token", "--secret-file", s.secretFile, "--tenant", "acme", "--subject", "sub"+c1Hostile, "--scope", allScopes)
	if code != 0 {
		t.Fatalf("token: %d %s", code, stderr)
	}
	tok := strings.TrimSpace(out)
	start := map[string]any{"id": "c1", "command": "/bin/sh", "args": []string{"-c", `exit 0`, "sh", c1Hostile}}
	if code, body := s.call(t, "POST", "/v1/executions", "Bearer "+tok, start); code != 201 {
		t.Fatalf("start: %d %s", code, body)
	}
	s.call(t, "GET", "/v1/executions/x"+strings.ReplaceAll(url.PathEscape(c1Hostile), ";", "%3B"), "Bearer "+tok, nil)
	if !sandboxtest.Eventually(t, 60*time.Second, func() bool {
		return len(matching(s.records(t), map[string]any{"event": "end", "execution": "c1"})) > 0
	}) {
		t.Fatalf("no end record; trail %v", s.records(t))
	}
	s.shutdown(t)()

	recs := s.records(t)
	st := matching(recs, map[string]any{"event": "start", "execution": "c1", "outcome": "ok"})
	if len(st) != 1 || st[0]["subject"] != "sub"+c1Hostile || fmt.Sprint(st[0]["argv"].([]any)[4]) != c1Hostile {
		t.Errorf("start record %v: want the subject and command line as given", st)
	}
	written := map[string]string{"stderr": s.errs.String()}
	for _, f := range audit.Files(s.audit, audit.MaxKeep) {
		b, _ := os.ReadFile(f)
		written[f] = string(b)
	}
	if !strings.Contains(written["stderr"], `sub\u009b2J`) {
		t.Errorf("serve's log does not name the subject, escaped: %s", written["stderr"])
	}
	for name, w := range written {
		for i, r := range w {
			if r >= 0x7f && r <= 0x9f {
				t.Errorf("%s holds a raw U+%04X at %d: %q", name, r, i, w[max(0, i-60):min(len(w), i+20)])
				break
			}
		}
	}
}
