package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/termgate/termgate/gateway/audit"
	"github.com/termgate/termgate/gateway/auth"
	"github.com/termgate/termgate/gateway/gatewaytest"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/sandbox"
	"github.com/termgate/termgate/sandbox/sandboxtest"
	"github.com/termgate/termgate/session"
	"github.com/termgate/termgate/session/sessiontest"
)

// auditEnv is a gateway over the fake launcher with its audit trail at
// path; its programs run until cancelled.
type auditEnv struct {
	*testEnv
	path string
	log  *sandboxtest.SyncBuffer
}

func newAuditEnv(t *testing.T, cfg audit.Config) *auditEnv {
	t.Helper()
	if cfg.Path == "" {
		cfg.Path = filepath.Join(t.TempDir(), "audit.log")
	}
	logs := &sandboxtest.SyncBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	cfg.Logger = log
	a, err := audit.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l := &sessiontest.Launcher{Script: func(p *sessiontest.Proc) sandbox.Exit {
		why := <-p.Stopped()
		return sandbox.Exit{Code: -1, Signal: syscall.SIGTERM, Stopped: why}
	}}
	e := newEnvSession(t, session.Config{Launcher: l, Logger: log}, func(c *Config) { c.Audit, c.Logger = a, log })
	t.Cleanup(func() { a.Close() }) // after the server and the supervisor (cleanups run last first)
	return &auditEnv{testEnv: e, path: cfg.Path, log: logs}
}

// readAudit reads every record of the trail, rotated files first.
func readAudit(t *testing.T, path string, keep int) []map[string]any {
	t.Helper()
	return gatewaytest.AuditRecords(t, audit.Files(path, keep), audit.MaxRecordSize)
}

// find returns the records whose fields hold every pair of want.
func find(recs []map[string]any, want map[string]any) []map[string]any {
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

// waitRecord waits until the trail holds a record matching want.
func (e *auditEnv) waitRecord(t *testing.T, want map[string]any) map[string]any {
	t.Helper()
	var got []map[string]any
	if !sandboxtest.Eventually(t, 10*time.Second, func() bool {
		got = find(readAudit(t, e.path, audit.DefaultKeep), want)
		return len(got) > 0
	}) {
		t.Fatalf("no record %v in the trail:\n%s", want, e.trail(t))
	}
	return got[len(got)-1]
}

func (e *auditEnv) trail(t *testing.T) string {
	b, _ := os.ReadFile(e.path)
	return string(b)
}

// api sends an HTTP API request and returns its status and body.
func (e *auditEnv) api(t *testing.T, method, path, token string, body any) (int, apiErrorBody) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, _ := http.NewRequestWithContext(t.Context(), method, e.http.URL+path, r)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var eb apiErrorBody
	json.NewDecoder(resp.Body).Decode(&eb)
	return resp.StatusCode, eb
}

// TestAuditCrossTenantWebSocket: another tenant's execution is answered
// exactly as an unknown one, and recorded as a refused cross-tenant
// attempt; the unknown one is not marked.
func TestAuditCrossTenantWebSocket(t *testing.T) {
	t.Parallel()
	e := newAuditEnv(t, audit.Config{})
	acme := e.dial(t, e.token(t, "acme", allScopes...))
	defer acme.close()
	acme.send(t, wire.Request{Type: wire.TypeStart, ID: "secret-job", Command: "/bin/sh"})
	acme.expect(t, wire.MsgStarted)

	globex := e.dial(t, e.token(t, "globex", allScopes...))
	defer globex.close()
	answers := map[string]wire.Message{}
	for _, id := range []string{"secret-job", "never-existed"} {
		for _, typ := range []string{wire.TypeAttach, wire.TypeCancel} {
			globex.send(t, wire.Request{Type: typ, Req: typ, ID: id})
			m, _ := globex.expect(t, wire.MsgError)
			m.Message = strings.ReplaceAll(m.Message, id, "ID")
			answers[typ+id] = m
		}
	}
	for _, typ := range []string{wire.TypeAttach, wire.TypeCancel} {
		theirs, unknown := answers[typ+"secret-job"], answers[typ+"never-existed"]
		if theirs.Error != wire.CodeNotFound || theirs.Error != unknown.Error || theirs.Message != unknown.Message || theirs.Req != unknown.Req {
			t.Errorf("%s: another tenant's id answered %+v, an unknown one %+v", typ, answers[typ+"secret-job"], answers[typ+"never-existed"])
		}
		r := e.waitRecord(t, map[string]any{"event": typ, "execution": "secret-job", "tenant": "globex"})
		if r["outcome"] != "refused" || r["code"] != "not_found" || r["cross_tenant"] != true || r["subject"] != "user-globex" || r["remote_addr"] == nil || r["via"] != "websocket" {
			t.Errorf("%s record %v: want refused not_found, cross_tenant, who and from where", typ, r)
		}
		u := e.waitRecord(t, map[string]any{"event": typ, "execution": "never-existed"})
		if u["outcome"] != "refused" || u["cross_tenant"] != nil {
			t.Errorf("%s of an unknown id recorded %v: want refused, not cross_tenant", typ, u)
		}
	}
	if ok := find(readAudit(t, e.path, 1), map[string]any{"tenant": "globex", "outcome": "ok"}); len(ok) != 0 {
		t.Errorf("a refused attempt has an ok record: %v", ok)
	}
}

// TestAuditCrossTenantHTTP: the same over the HTTP API, for every route
// that names an execution.
func TestAuditCrossTenantHTTP(t *testing.T) {
	t.Parallel()
	e := newAuditEnv(t, audit.Config{})
	acme := e.token(t, "acme", allScopes...)
	if st, b := e.api(t, "POST", "/v1/executions", acme, apiStart{ID: "secret-job", Command: "/bin/sh"}); st != 201 {
		t.Fatalf("start: %d %+v", st, b)
	}
	globex := e.token(t, "globex", allScopes...)
	for _, r := range []struct{ method, path, event string }{
		{"GET", "/v1/executions/secret-job", "get"},
		{"GET", "/v1/executions/secret-job/events", "events"},
		{"POST", "/v1/executions/secret-job/input", "input"},
		{"POST", "/v1/executions/secret-job/cancel", "cancel"},
	} {
		var body any
		if r.event == "input" {
			body = apiInput{Data: []byte("x")}
		}
		if st, b := e.api(t, r.method, r.path, globex, body); st != 404 || b.Error != "not_found" {
			t.Errorf("%s %s: %d %+v, want 404 not_found", r.method, r.path, st, b)
		}
		rec := e.waitRecord(t, map[string]any{"event": r.event, "execution": "secret-job", "tenant": "globex"})
		if rec["outcome"] != "refused" || rec["code"] != "not_found" || rec["cross_tenant"] != true || rec["via"] != "http" || rec["subject"] != "user-globex" {
			t.Errorf("%s %s recorded %v: want refused not_found, cross_tenant", r.method, r.path, rec)
		}
	}
	if ok := find(readAudit(t, e.path, 1), map[string]any{"tenant": "globex", "outcome": "ok"}); len(ok) != 0 {
		t.Errorf("a refused attempt has an ok record: %v", ok)
	}
}

// TestAuditForbiddenScope: requests beyond the token's scopes, and
// refused tokens (with their reason only), are recorded as refused.
func TestAuditForbiddenScope(t *testing.T) {
	t.Parallel()
	e := newAuditEnv(t, audit.Config{})
	viewer := e.token(t, "acme", auth.ScopeAttach)
	c := e.dial(t, viewer)
	defer c.close()
	c.send(t, wire.Request{Type: wire.TypeStart, Req: "s", ID: "nope", Command: "/bin/sh"})
	if m, _ := c.expect(t, wire.MsgError); m.Error != wire.CodeForbidden {
		t.Fatalf("start without exec:create answered %+v", m)
	}
	r := e.waitRecord(t, map[string]any{"event": "start", "via": "websocket"})
	if r["outcome"] != "refused" || r["code"] != "forbidden" || r["tenant"] != "acme" || r["subject"] != "user-acme" {
		t.Errorf("start record %v: want refused forbidden, with who", r)
	}
	if st, _ := e.api(t, "POST", "/v1/executions/any/cancel", viewer, nil); st != 403 {
		t.Fatalf("cancel without exec:write: %d", st)
	}
	r = e.waitRecord(t, map[string]any{"event": "cancel", "via": "http"})
	if r["outcome"] != "refused" || r["code"] != "forbidden" || r["tenant"] != "acme" {
		t.Errorf("cancel record %v", r)
	}
	if _, resp, err := e.dialRaw(e.token(t, "acme"), nil); err == nil || status(resp) != 403 {
		t.Fatalf("a token without scopes connected: %v %d", err, status(resp))
	}
	e.waitRecord(t, map[string]any{"event": "connect", "code": "forbidden", "tenant": "acme"})
	bad := viewer[:len(viewer)-4] + "AAAA"
	if st, _ := e.api(t, "GET", "/v1/executions", bad, nil); st != 401 {
		t.Fatalf("a bad signature: %d", st)
	}
	r = e.waitRecord(t, map[string]any{"event": "list", "code": "unauthorized"})
	if r["reason"] != "signature" || r["tenant"] != nil {
		t.Errorf("auth failure record %v: want the reason only", r)
	}
	if strings.Contains(e.trail(t), viewer[len(viewer)-20:]) {
		t.Error("the trail holds a token")
	}
}

// TestAuditLifecycle: every step of an execution's life is one record
// in order, with its details: start, attach, first input, resize,
// signal, cancel, the channel's close with the input it delivered, and
// how it ended.
func TestAuditLifecycle(t *testing.T) {
	t.Parallel()
	e := newAuditEnv(t, audit.Config{})
	c := e.dial(t, e.token(t, "acme", allScopes...))
	c.send(t, wire.Request{Type: wire.TypeStart, ID: "life", Command: "/bin/sh", Args: []string{"-c", "echo hi"},
		PTY: &wire.Size{Rows: 24, Cols: 80}, Cwd: "/workspace", Attach: true})
	c.expect(t, wire.MsgStarted)
	att, _ := c.expect(t, wire.MsgAttached)
	c.sendInput(t, att.Channel, 0, "abc")
	c.sendInput(t, att.Channel, 3, "defg")
	c.sendInput(t, att.Channel, 0, "abcdefg") // a retry: nothing new
	for _, r := range []wire.Request{
		{Type: wire.TypeResize, Req: "r", Channel: att.Channel, Rows: 30, Cols: 100},
		{Type: wire.TypeSignal, Req: "s", Channel: att.Channel, Signal: "INT"},
	} {
		c.send(t, r)
		c.expect(t, wire.MsgOK)
	}
	// The cancel's answer and the channel's exit come in either order
	// (PROTOCOL.md, Ordering): the exit may be written before the answer.
	c.send(t, wire.Request{Type: wire.TypeCancel, Req: "c", Channel: att.Channel})
	got := map[string]bool{}
	for range 2 {
		got[c.expectAny(t, wire.MsgOK, wire.MsgExit).Type] = true
	}
	if !got[wire.MsgOK] || !got[wire.MsgExit] {
		t.Fatalf("after the cancel: %v, want its ok and the exit", got)
	}
	end := e.waitRecord(t, map[string]any{"event": "end", "execution": "life"})
	det := e.waitRecord(t, map[string]any{"event": "detach", "execution": "life"})
	c.close()
	var events []string
	for _, r := range find(readAudit(t, e.path, 1), map[string]any{"execution": "life"}) {
		events = append(events, r["event"].(string))
		if r["outcome"] != "ok" || r["tenant"] != "acme" || r["subject"] != "user-acme" || r["remote_addr"] == nil {
			t.Errorf("record %v: want ok, tenant, subject and address", r)
		}
		if _, err := time.Parse(time.RFC3339Nano, r["time"].(string)); err != nil || !strings.HasSuffix(r["time"].(string), "Z") {
			t.Errorf("time %v: want RFC 3339 in UTC", r["time"])
		}
	}
	want := "start attach input resize signal cancel"
	if got := strings.Join(events[:min(6, len(events))], " "); got != want || len(events) != 8 {
		t.Fatalf("events %v, want %s then detach and end in either order", events, want)
	}
	start := find(readAudit(t, e.path, 1), map[string]any{"event": "start"})[0]
	if start["command"] != "/bin/sh" || fmt.Sprint(start["argv"]) != "[/bin/sh -c echo hi]" || start["tty"] != true ||
		start["cwd"] != "/workspace" || start["workspace"] == nil || start["rows"] != 24.0 {
		t.Errorf("start record %v", start)
	}
	if det["input_bytes"] != 7.0 || det["reason"] != "ended" || det["channel"] != float64(att.Channel) {
		t.Errorf("detach record %v: want the 7 bytes delivered", det)
	}
	if end["status"] != "cancelled" || end["signal"] != "SIGTERM" || end["exit_code"] != -1.0 || end["input_bytes"] != 7.0 ||
		end["stdout_bytes"] == nil || end["duration"] == nil || end["subject"] != "user-acme" {
		t.Errorf("end record %v", end)
	}
	rs := find(readAudit(t, e.path, 1), map[string]any{"event": "resize"})[0]
	sg := find(readAudit(t, e.path, 1), map[string]any{"event": "signal"})[0]
	if rs["rows"] != 30.0 || rs["cols"] != 100.0 || sg["signal"] != "INT" {
		t.Errorf("resize %v, signal %v", rs, sg)
	}
}

// TestAuditAttachReadOnly: an attach records read_only and the resume
// point; an HTTP start and input record their sizes, never bytes.
func TestAuditAttachReadOnly(t *testing.T) {
	t.Parallel()
	e := newAuditEnv(t, audit.Config{})
	tok := e.token(t, "acme", allScopes...)
	if st, b := e.api(t, "POST", "/v1/executions", tok, apiStart{ID: "job", Command: "/bin/sh"}); st != 201 {
		t.Fatalf("start: %d %+v", st, b)
	}
	if st, b := e.api(t, "POST", "/v1/executions/job/input", tok, apiInput{Data: []byte("s3cr3t-typed")}); st != 200 {
		t.Fatalf("input: %d %+v", st, b)
	}
	c := e.dial(t, e.token(t, "acme", auth.ScopeAttach))
	defer c.close()
	job, err := e.sup.Get("acme", "job")
	if err != nil {
		t.Fatal(err)
	}
	c.send(t, wire.Request{Type: wire.TypeAttach, ID: "job", After: 1, Incarnation: job.Incarnation})
	c.expect(t, wire.MsgAttached)
	r := e.waitRecord(t, map[string]any{"event": "attach", "execution": "job"})
	if r["read_only"] != true || r["after"] != 1.0 || r["outcome"] != "ok" {
		t.Errorf("attach record %v: want read_only and after 1", r)
	}
	in := e.waitRecord(t, map[string]any{"event": "input", "via": "http"})
	if in["input_bytes"] != 12.0 || strings.Contains(e.trail(t), "s3cr3t") {
		t.Errorf("input record %v; the trail must hold its size, never its bytes", in)
	}
	st := e.waitRecord(t, map[string]any{"event": "start", "via": "http"})
	if st["execution"] != "job" || st["outcome"] != "ok" {
		t.Errorf("start record %v", st)
	}
}

// TestAuditNamesAStartWithoutID: a start that names no execution gets
// its ID before its record, so the start and the end can be matched.
func TestAuditNamesAStartWithoutID(t *testing.T) {
	t.Parallel()
	e := newAuditEnv(t, audit.Config{})
	c := e.dial(t, e.token(t, "acme", allScopes...))
	defer c.close()
	c.send(t, wire.Request{Type: wire.TypeStart, Command: "/bin/sh"})
	m, _ := c.expect(t, wire.MsgStarted)
	if r := e.waitRecord(t, map[string]any{"event": "start"}); r["execution"] != m.ID || m.ID == "" {
		t.Fatalf("started %q, recorded %v", m.ID, r)
	}
}
