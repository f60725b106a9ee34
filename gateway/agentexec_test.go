package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/termgate/termgate/gateway/auth"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/sandbox/sandboxtest"
)

func yieldMS(ms int64) *int64 { return &ms }

// agentToken may start, read and write.
func (e *apiEnv) agentToken(t *testing.T) string {
	return e.token(t, "acme", auth.ScopeCreate, auth.ScopeAttach, auth.ScopeWrite)
}

func (e *apiEnv) exec(t *testing.T, tok string, want int, body wire.ExecRequest) wire.ExecResult {
	t.Helper()
	var res wire.ExecResult
	e.must(t, want, http.MethodPost, "/v1/exec", tok, body, &res)
	return res
}

func (e *apiEnv) write(t *testing.T, tok, id string, body wire.WriteRequest) wire.ExecResult {
	t.Helper()
	var res wire.ExecResult
	e.must(t, http.StatusOK, http.MethodPost, "/v1/executions/"+id+"/write", tok, body, &res)
	return res
}

func TestAgentExecEndsAtTheExitNotTheYield(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t, nil)
	tok := e.agentToken(t)
	began := time.Now()
	res := e.exec(t, tok, http.StatusCreated, wire.ExecRequest{Command: "sleep 0.2; echo hi; sleep 0.1; echo err >&2", Wait: wire.Wait{YieldMS: yieldMS(10_000)}})
	// The yield is 10 s: an answer before 5 s ended at the exit, which is
	// all this checks (the benchmark measures how soon).
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("exec took %v: it waited for the yield after the exit", took)
	}
	if res.Running || res.Exit == nil || res.Exit.Code != 0 || res.Exit.Reason != "exited" {
		t.Fatalf("answer %+v", res)
	}
	if res.Output != "hi\nerr\n" || res.OmittedBytes != 0 || res.FromSeq != 1 || res.NextSeq <= res.FromSeq {
		t.Fatalf("answer %+v", res)
	}
	// Nothing follows the exit: a continue returns at once, empty.
	again := e.exec(t, tok, http.StatusOK, wire.ExecRequest{ID: res.ID, Wait: wire.Wait{YieldMS: yieldMS(10_000)}})
	if again.Output != "" || again.Exit == nil || again.FromSeq != res.NextSeq {
		t.Fatalf("continue after the exit: %+v", again)
	}
}

func TestAgentExecRunningThenWrite(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t, nil)
	tok := e.agentToken(t)
	// The yield is a safety net: the command blocks on its read, so the
	// answer comes after it whatever the load, with what it wrote by then.
	res := e.exec(t, tok, http.StatusCreated, wire.ExecRequest{Command: "echo ready; read line; echo got $line; exit 3", Interactive: true, Wait: wire.Wait{YieldMS: yieldMS(3000)}})
	if !res.Running || res.Exit != nil || res.Output != "ready\n" {
		t.Fatalf("answer %+v", res)
	}
	// The same write twice, as a retry after a cut connection sends it:
	// the second adds nothing.
	off := uint64(0)
	w := wire.WriteRequest{Input: "abc\n", Offset: &off, Wait: wire.Wait{YieldMS: yieldMS(10_000)}}
	got := e.write(t, tok, res.ID, w)
	if got.Running || got.Exit == nil || got.Exit.Code != 3 || got.Output != "got abc\n" || got.InputOffset != 4 {
		t.Fatalf("write: %+v", got)
	}
	if got.FromSeq != res.NextSeq {
		t.Fatalf("write read from %d, the exec left off at %d", got.FromSeq, res.NextSeq)
	}
	again := e.write(t, tok, res.ID, w)
	if again.InputOffset != 4 {
		t.Fatalf("a retried write was applied again: input offset %d", again.InputOffset)
	}
	// A retry of the answer (seq given) reads it again.
	w.Seq = got.FromSeq
	if retry := e.write(t, tok, res.ID, w); retry.Output != got.Output || retry.NextSeq != got.NextSeq {
		t.Fatalf("a retry from seq %d: %+v, first %+v", w.Seq, retry, got)
	}
}

func TestAgentExecHeadAndTail(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t, nil)
	tok := e.agentToken(t)
	res := e.exec(t, tok, http.StatusCreated, wire.ExecRequest{Argv: []string{"/bin/sh", "-c", "seq 1 100000"}, Wait: wire.Wait{MaxOutputBytes: 1000}})
	var all strings.Builder
	for i := 1; i <= 100000; i++ {
		fmt.Fprintf(&all, "%d\n", i)
	}
	whole := all.String()
	if res.Exit == nil || len(res.Output) > 1000 || int64(len(res.Output))+res.OmittedBytes != int64(len(whole)) {
		t.Fatalf("%d bytes, %d omitted, of %d", len(res.Output), res.OmittedBytes, len(whole))
	}
	if head, tail := res.Output[:res.OmittedAt], res.Output[res.OmittedAt:]; !strings.HasPrefix(whole, head) || !strings.HasSuffix(whole, tail) || len(head) != 500 {
		t.Fatalf("not the head and tail: %q | %q", head, tail)
	}
}

func TestAgentExecTerminalText(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t, nil)
	tok := e.agentToken(t)
	res := e.exec(t, tok, http.StatusCreated, wire.ExecRequest{Command: `printf '\033[31mred\033[0m \303'; printf '\251\n'`, TTY: true})
	if res.Output != "red é\n" || res.ReplacedBytes != 0 {
		t.Fatalf("terminal output as text: %q (%+v)", res.Output, res)
	}
	raw := false
	res = e.exec(t, tok, http.StatusCreated, wire.ExecRequest{Command: `printf '\033[31mred\n\377'`, TTY: true, Wait: wire.Wait{StripANSI: &raw}})
	if res.Output != "\x1b[31mred\r\n\uFFFD" || res.ReplacedBytes != 1 {
		t.Fatalf("raw terminal output: %q (%+v)", res.Output, res)
	}
}

func TestAgentExecContinuesWhereItLeftOff(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t, nil)
	tok := e.agentToken(t)
	res := e.exec(t, tok, http.StatusCreated, wire.ExecRequest{Command: "for i in 1 2 3 4 5 6; do echo $i; sleep 0.1; done", Wait: wire.Wait{YieldMS: yieldMS(150)}})
	out := res.Output
	for i := 0; res.Exit == nil && i < 100; i++ {
		res = e.exec(t, tok, http.StatusOK, wire.ExecRequest{ID: res.ID, Wait: wire.Wait{YieldMS: yieldMS(150)}})
		out += res.Output
	}
	if out != "1\n2\n3\n4\n5\n6\n" {
		t.Fatalf("continues put together: %q", out)
	}
}

func TestAgentExecRefusals(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t, nil)
	tok := e.agentToken(t)
	for _, c := range []struct {
		status int
		code   string
		body   any
	}{
		{400, wire.CodeBadRequest, wire.ExecRequest{Argv: []string{"/bin/true"}, Command: "true"}},
		{400, wire.CodeBadRequest, wire.ExecRequest{}},
		{400, wire.CodeBadRequest, wire.ExecRequest{Argv: []string{}}},
		{400, wire.CodeBadRequest, wire.ExecRequest{Command: "true", Wait: wire.Wait{YieldMS: yieldMS(wire.MaxYieldMS + 1)}}},
		{400, wire.CodeBadRequest, wire.ExecRequest{Command: "true", Wait: wire.Wait{MaxOutputBytes: wire.MaxMaxOutputBytes + 1}}},
		{400, wire.CodeBadRequest, wire.ExecRequest{Command: "true", Rows: 10}},
		{400, wire.CodeBadRequest, wire.ExecRequest{ID: "x", Cwd: "/tmp"}},
		{400, wire.CodeBadRequest, `{"command": "true", "yield": 5}`},
		{404, wire.CodeNotFound, wire.ExecRequest{ID: "nothing-here"}},
		{400, wire.CodeInvalidSpec, wire.ExecRequest{Argv: []string{"/usr/bin/python3"}}},
	} {
		e.fails(t, c.status, c.code, http.MethodPost, "/v1/exec", tok, c.body)
	}
	read := e.token(t, "acme", auth.ScopeAttach)
	e.fails(t, 403, wire.CodeForbidden, http.MethodPost, "/v1/exec", read, wire.ExecRequest{Command: "true"})
	e.fails(t, 403, wire.CodeForbidden, http.MethodPost, "/v1/exec", e.token(t, "acme", auth.ScopeCreate), wire.ExecRequest{Command: "true"})
	// A reader may continue (read) an execution, not write to it.
	res := e.exec(t, tok, http.StatusCreated, wire.ExecRequest{Command: "echo read me"})
	if got := e.exec(t, read, http.StatusOK, wire.ExecRequest{ID: res.ID, Wait: wire.Wait{Seq: 1}}); got.Output != "read me\n" {
		t.Errorf("a reader's continue: %+v", got)
	}
	e.fails(t, 403, wire.CodeForbidden, http.MethodPost, "/v1/exec", read, wire.ExecRequest{ID: res.ID, Stdin: "x"})
	e.fails(t, 403, wire.CodeForbidden, http.MethodPost, "/v1/executions/x/write", read, wire.WriteRequest{Input: "x"})
	e.fails(t, 404, wire.CodeNotFound, http.MethodPost, "/v1/executions/nothing-here/write", tok, wire.WriteRequest{Input: "x"})
}

// TestAgentExecHundredAtOnce: 100 agent execs held at once, ten tenants
// of ten, at the default limits: none is refused, each gets its own
// output and exit.
func TestAgentExecHundredAtOnce(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t, nil)
	type answer struct {
		tenant, want string
		status       int
		res          wire.ExecResult
		err          error
	}
	answers := make(chan answer, 100)
	for i := range 100 {
		tenant := fmt.Sprintf("t%d", i%10)
		tok := e.token(t, tenant, auth.ScopeCreate, auth.ScopeAttach, auth.ScopeWrite)
		go func() {
			a := answer{tenant: tenant, want: fmt.Sprintf("n%d\n", i)}
			var body []byte
			a.status, _, body, a.err = e.do(t.Context(), http.MethodPost, "/v1/exec", tok, wire.ExecRequest{Command: "sleep 0.5; echo n" + fmt.Sprint(i), Wait: wire.Wait{YieldMS: yieldMS(wire.MaxYieldMS)}})
			if a.err == nil {
				a.err = json.Unmarshal(body, &a.res)
			}
			answers <- a
		}()
	}
	for range 100 {
		a := <-answers
		if a.err != nil || a.status != http.StatusCreated || a.res.Output != a.want || a.res.Exit == nil || a.res.Exit.Code != 0 {
			t.Errorf("tenant %s: %d %v %+v, want %q", a.tenant, a.status, a.err, a.res, a.want)
		}
	}
}

// TestAgentExecOverWebSocket: exec and write as WebSocket requests, each
// answered with exec-result when its wait ends, while the connection
// serves its other requests; a continue ends at once after the exit; at
// most MaxAgentCalls wait at once.
func TestAgentExecOverWebSocket(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	c := e.dial(t, e.token(t, "acme", allScopes...))
	defer c.close()
	c.send(t, wire.Request{Type: wire.TypeExec, Req: "run", Exec: &wire.ExecRequest{ID: "ws-1", Command: "echo ready; read l; echo got $l", Interactive: true, Wait: wire.Wait{YieldMS: yieldMS(3000)}}})
	c.send(t, wire.Request{Type: wire.TypePing, Req: "meanwhile"})
	if m := c.expectAny(t, wire.MsgPong, wire.MsgExecResult); m.Type != wire.MsgPong {
		t.Fatalf("the wait held the connection: %+v", m)
	}
	m, _ := c.expect(t, wire.MsgExecResult)
	if m.Req != "run" || m.Result == nil || !m.Result.Running || m.Result.Output != "ready\n" || m.ID != "ws-1" {
		t.Fatalf("exec: %+v %+v", m, m.Result)
	}
	off := uint64(0)
	c.send(t, wire.Request{Type: wire.TypeWrite, Req: "w", ID: "ws-1", Write: &wire.WriteRequest{Input: "x\n", Offset: &off}})
	if m, _ = c.expect(t, wire.MsgExecResult); m.Result.Output != "got x\n" || m.Result.Exit == nil || m.Result.Exit.Code != 0 {
		t.Fatalf("write: %+v", m.Result)
	}
	c.send(t, wire.Request{Type: wire.TypeExec, Req: "stdin", Exec: &wire.ExecRequest{Command: "cat", Stdin: "typed\n", CloseStdin: true}})
	if m, _ = c.expect(t, wire.MsgExecResult); m.Result.Output != "typed\n" || m.Result.Exit == nil {
		t.Fatalf("an exec with stdin and no id: %+v", m.Result)
	}
	c.send(t, wire.Request{Type: wire.TypeExec, Req: "again", Exec: &wire.ExecRequest{ID: "ws-1"}})
	if m, _ = c.expect(t, wire.MsgExecResult); m.Result.Running || m.Result.Output != "" {
		t.Fatalf("a continue after the exit: %+v", m.Result)
	}

	c.send(t, wire.Request{Type: wire.TypeExec, Req: "long", Exec: &wire.ExecRequest{ID: "ws-2", Command: "sleep 30", Wait: wire.Wait{YieldMS: yieldMS(0)}}})
	c.expect(t, wire.MsgExecResult)
	for i := range MaxAgentCalls + 1 {
		c.send(t, wire.Request{Type: wire.TypeExec, Req: fmt.Sprint("c", i), Exec: &wire.ExecRequest{ID: "ws-2", Wait: wire.Wait{YieldMS: yieldMS(2000)}}})
	}
	if m := c.expectAny(t, wire.MsgError); m.Error != wire.CodeCapacity || m.Req != fmt.Sprint("c", MaxAgentCalls) {
		t.Fatalf("call %d: %+v", MaxAgentCalls+1, m)
	}
	for range MaxAgentCalls {
		if m, _ := c.expect(t, wire.MsgExecResult); !m.Result.Running {
			t.Fatalf("a held continue: %+v", m.Result)
		}
	}
	for _, r := range []wire.Request{
		{Type: wire.TypeExec, Req: "no-body"},
		{Type: wire.TypeWrite, Req: "no-id", Write: &wire.WriteRequest{}},
		{Type: wire.TypeExec, Req: "yield", Exec: &wire.ExecRequest{Command: "true", Wait: wire.Wait{YieldMS: yieldMS(-1)}}},
	} {
		c.send(t, r)
		if m := c.expectAny(t, wire.MsgError); m.Req != r.Req || (m.Error != wire.CodeInvalidRequest && m.Error != wire.CodeBadRequest) {
			t.Errorf("%s: %+v", r.Req, m)
		}
	}
}

// TestAgentExecAppendsAtOnce: writes without an offset, many at once,
// each arrive whole: none is taken for a resend of another.
func TestAgentExecAppendsAtOnce(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t, nil)
	tok := e.agentToken(t)
	res := e.exec(t, tok, http.StatusCreated, wire.ExecRequest{Command: "cat", Interactive: true, Wait: wire.Wait{YieldMS: yieldMS(0)}})
	const n = 200
	done := make(chan error, n)
	for i := range n {
		go func() {
			status, _, b, err := e.do(t.Context(), http.MethodPost, "/v1/executions/"+res.ID+"/write", tok, wire.WriteRequest{Input: fmt.Sprintf("line-%03d\n", i), Wait: wire.Wait{YieldMS: yieldMS(0)}})
			if err == nil && status != http.StatusOK {
				err = fmt.Errorf("%d %s", status, b)
			}
			done <- err
		}()
	}
	for range n {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	e.write(t, tok, res.ID, wire.WriteRequest{CloseStdin: true, Wait: wire.Wait{YieldMS: yieldMS(0)}})
	out := e.exec(t, tok, http.StatusOK, wire.ExecRequest{ID: res.ID, Wait: wire.Wait{Seq: 1, YieldMS: yieldMS(10_000)}}).Output
	for i := range n {
		if !strings.Contains(out, fmt.Sprintf("line-%03d\n", i)) {
			t.Errorf("line %d is missing from %q", i, out)
		}
	}
	if len(out) != n*len("line-000\n") {
		t.Errorf("cat read %d bytes, %d were written: %q", len(out), n*len("line-000\n"), out)
	}
}

// TestAgentExecRefusesStdinBeforeStarting: a start whose stdin the
// token may not write is refused, and nothing was started.
func TestAgentExecRefusesStdinBeforeStarting(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t, nil)
	noWrite := e.token(t, "acme", auth.ScopeCreate, auth.ScopeAttach)
	e.fails(t, 403, wire.CodeForbidden, http.MethodPost, "/v1/exec", noWrite, wire.ExecRequest{ID: "with-stdin", Command: "cat", Stdin: "x"})
	e.fails(t, 404, wire.CodeNotFound, http.MethodGet, "/v1/executions/with-stdin", noWrite, nil)
}

// TestAgentExecWaitsCountPerSubject: a waiting call takes a place of its
// subject's budget, as a long poll does.
func TestAgentExecWaitsCountPerSubject(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t, func(c *Config) { c.MaxConnsPerSubject = 1 })
	tok := e.agentToken(t)
	res := e.exec(t, tok, http.StatusCreated, wire.ExecRequest{Command: "sleep 30", Wait: wire.Wait{YieldMS: yieldMS(0)}})
	held := make(chan struct{})
	go func() {
		defer close(held)
		e.do(t.Context(), http.MethodPost, "/v1/exec", tok, wire.ExecRequest{ID: res.ID, Wait: wire.Wait{YieldMS: yieldMS(3000)}})
	}()
	if !sandboxtest.Eventually(t, 10*time.Second, func() bool { return e.srv.subjectHeld(auth.Claims{Tenant: "acme", Subject: "user-acme"}) == 1 }) {
		t.Fatal("the first wait took no place")
	}
	e.fails(t, 429, wire.CodeTooManyConnections, http.MethodPost, "/v1/exec", tok, wire.ExecRequest{ID: res.ID, Wait: wire.Wait{YieldMS: yieldMS(1000)}})
	// A call that does not wait takes none.
	e.exec(t, tok, http.StatusOK, wire.ExecRequest{ID: res.ID, Wait: wire.Wait{YieldMS: yieldMS(0)}})
	<-held
}

// TestAgentExecCursorsBounded: past maxCursors the cursors of executions
// that are gone are dropped, and a cursor never moves back.
func TestAgentExecCursorsBounded(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t, nil)
	x := e.srv.agent
	c := auth.Claims{Tenant: "acme", Subject: "user-acme"}
	for i := range maxCursors {
		x.keep(c, wire.ExecResult{ID: fmt.Sprint("gone-", i), Incarnation: "i", NextSeq: 2})
	}
	tok := e.agentToken(t)
	res := e.exec(t, tok, http.StatusCreated, wire.ExecRequest{Command: "echo hi"})
	x.mu.Lock()
	n := len(x.cursors)
	x.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d cursors kept past the bound, want the live one alone", n)
	}
	x.keep(c, wire.ExecResult{ID: res.ID, Incarnation: res.Incarnation, NextSeq: 1})
	info, _ := e.sup.Get("acme", res.ID)
	if got := x.from(c, info, 0); got != res.NextSeq {
		t.Fatalf("the cursor moved back to %d from %d", got, res.NextSeq)
	}
}
