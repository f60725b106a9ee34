package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/termgate/termgate/gateway/auth"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/replay"
	"github.com/termgate/termgate/sandbox"
	"github.com/termgate/termgate/sandbox/sandboxtest"
	"github.com/termgate/termgate/session"
)

// apiEnv serves the HTTP API from its own mux on 127.0.0.1, so these
// tests do not depend on which routes Server.Handler registers.
type apiEnv struct {
	*testEnv
	api *httptest.Server
}

func newAPIEnv(t testing.TB, tweak func(*Config)) *apiEnv {
	t.Helper()
	return newAPIEnvSession(t, session.Config{Launcher: session.SandboxLauncher(needLauncher(t))}, tweak)
}

// newAPIEnvSession is newAPIEnv over a supervisor configured as sc.
func newAPIEnvSession(t testing.TB, sc session.Config, tweak func(*Config)) *apiEnv {
	t.Helper()
	e := newEnvSession(t, sc, tweak)
	mux := http.NewServeMux()
	e.srv.apiRoutes(mux)
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	ts.Client().Transport = newContract(t, ts.Client().Transport)
	return &apiEnv{testEnv: e, api: ts}
}

// call sends a request with token (none when empty) and body (none when
// nil; a string is sent as is, anything else as JSON) and returns the
// answer's status, headers and body.
func (e *apiEnv) call(t *testing.T, method, path, token string, body any) (int, http.Header, []byte) {
	t.Helper()
	status, h, b, err := e.do(t.Context(), method, path, token, body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return status, h, b
}

// do is call for any goroutine: it reports errors instead of failing.
func (e *apiEnv) do(ctx context.Context, method, path, token string, body any) (int, http.Header, []byte, error) {
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			return 0, nil, nil, err
		}
		r = bytes.NewReader(j)
	}
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, e.api.URL+path, r)
	if err != nil {
		return 0, nil, nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := e.api.Client().Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b, err
}

// must is call that fails the test unless the status is want, and
// decodes the answer into out (when not nil).
func (e *apiEnv) must(t *testing.T, want int, method, path, token string, body, out any) http.Header {
	t.Helper()
	status, h, b := e.call(t, method, path, token, body)
	if status != want {
		t.Fatalf("%s %s: status %d, want %d: %s", method, path, status, want, b)
	}
	if ct := h.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("%s %s: content type %q", method, path, ct)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: decode %s: %v", method, path, b, err)
		}
	}
	return h
}

// fails checks an error answer: status and stable code.
func (e *apiEnv) fails(t *testing.T, status int, code, method, path, token string, body any) apiErrorBody {
	t.Helper()
	var got apiErrorBody
	e.must(t, status, method, path, token, body, &got)
	if got.Error != code || got.Message == "" {
		t.Fatalf("%s %s: answer %+v, want code %q", method, path, got, code)
	}
	return got
}

func (e *apiEnv) poll(t *testing.T, token, id string, after uint64, wait string) apiEvents {
	t.Helper()
	var page apiEvents
	e.must(t, 200, "GET", e.eventsPath(t, token, id, after, wait), token, nil, &page)
	return page
}

// eventsPath is the long poll's path after sequence after of id's
// current incarnation.
func (e *apiEnv) eventsPath(t *testing.T, token, id string, after uint64, wait string) string {
	t.Helper()
	path := fmt.Sprintf("/v1/executions/%s/events?after=%d&wait=%s", id, after, wait)
	if after > 0 {
		var info session.Info
		e.must(t, 200, "GET", "/v1/executions/"+id, token, nil, &info)
		path += "&incarnation=" + info.Incarnation
	}
	return path
}

// printed is everything an execution wrote, read by long polls
// until the exit event.
type printed struct {
	out, err string
	kinds    []string
	exit     *apiExit
	status   session.Status
}

func (e *apiEnv) readAll(t *testing.T, token, id string) printed {
	t.Helper()
	var tr printed
	after := uint64(0)
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		page := e.poll(t, token, id, after, "20s")
		if page.Gap != nil {
			t.Fatalf("unexpected gap %+v", page.Gap)
		}
		for _, ev := range page.Events {
			if ev.Seq != after+1 {
				t.Fatalf("event seq %d after %d", ev.Seq, after)
			}
			after = ev.Seq
			tr.kinds = append(tr.kinds, ev.Kind)
			data, err := base64.StdEncoding.DecodeString(ev.Data)
			if err != nil {
				t.Fatalf("event %d data: %v", ev.Seq, err)
			}
			switch ev.Stream {
			case "stdout", "pty":
				tr.out += string(data)
			case "stderr":
				tr.err += string(data)
			}
			if ev.Exit != nil {
				tr.exit = ev.Exit
			}
		}
		if page.NextAfter != after {
			t.Fatalf("next_after %d, last event %d", page.NextAfter, after)
		}
		if page.Ended {
			tr.status = page.Status
			return tr
		}
	}
	t.Fatalf("%s did not end", id)
	return tr
}

func shStart(id, script string) apiStart {
	return apiStart{ID: id, Command: "/bin/sh", Args: []string{"-c", script}}
}

func TestHTTPStartGetListAndIdempotency(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t, nil)
	tok := e.token(t, "acme", allScopes...)
	start := shStart("job-1", "echo out; echo err >&2; exit 3")

	var info session.Info
	h := e.must(t, 201, "POST", "/v1/executions", tok, start, &info)
	if info.ID != "job-1" || h.Get("Location") != "/v1/executions/job-1" {
		t.Fatalf("started %+v, location %q", info, h.Get("Location"))
	}
	var again session.Info
	e.must(t, 200, "POST", "/v1/executions", tok, start, &again)
	if again.ID != "job-1" || !again.Started.Equal(info.Started) {
		t.Fatalf("retry started another execution: %+v", again)
	}
	e.fails(t, 409, "conflict", "POST", "/v1/executions", tok, shStart("job-1", "echo other"))

	var generated session.Info
	e.must(t, 201, "POST", "/v1/executions", tok, shStart("", "true"), &generated)
	if !strings.HasPrefix(generated.ID, "x-") {
		t.Fatalf("generated id %q", generated.ID)
	}

	tr := e.readAll(t, tok, "job-1")
	if tr.out != "out\n" || tr.err != "err\n" || tr.exit == nil || tr.exit.Code != 3 || tr.exit.Reason != "exited" || tr.status != session.StatusExited {
		t.Fatalf("printed %+v", tr)
	}
	if tr.kinds[0] != "started" || tr.kinds[len(tr.kinds)-1] != "exit" {
		t.Fatalf("event kinds %v", tr.kinds)
	}
	var got session.Info
	e.must(t, 200, "GET", "/v1/executions/job-1", tok, nil, &got)
	if got.Status != session.StatusExited || got.Result == nil || got.Result.ExitCode != 3 || string(got.Result.Stdout.Head) != "out\n" {
		t.Fatalf("get %+v", got)
	}
	var list struct{ Executions []session.Info }
	e.must(t, 200, "GET", "/v1/executions", tok, nil, &list)
	if len(list.Executions) != 2 || list.Executions[0].ID != "job-1" || list.Executions[1].ID != generated.ID {
		t.Fatalf("list %+v", list)
	}
}

// pollAsync starts a long poll and returns its answer and how long it
// took on the channel.
func (e *apiEnv) pollAsync(t *testing.T, token, id string, after uint64, wait string) <-chan polled {
	ch := make(chan polled, 1)
	path := e.eventsPath(t, token, id, after, wait)
	go func() {
		t0 := time.Now()
		var p polled
		p.status, _, p.body, p.err = e.do(t.Context(), "GET", path, token, nil)
		if p.err == nil && p.status == 200 {
			p.err = json.Unmarshal(p.body, &p.page)
		}
		p.elapsed = time.Since(t0)
		ch <- p
	}()
	return ch
}

type polled struct {
	page    apiEvents
	status  int
	body    []byte
	err     error
	elapsed time.Duration
}

func TestHTTPEventsLongPoll(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t, nil)
	tok := e.token(t, "acme", allScopes...)
	e.must(t, 201, "POST", "/v1/executions", tok, shStart("lp", "read x; echo got=$x; read y; exit 4"), nil)

	first := e.poll(t, tok, "lp", 0, "0")
	if len(first.Events) != 1 || first.Events[0].Kind != "started" || first.NextAfter != 1 || first.Ended || first.Status != session.StatusRunning {
		t.Fatalf("first poll %+v", first)
	}

	t0 := time.Now()
	idle := e.poll(t, tok, "lp", 1, "300ms")
	if len(idle.Events) != 0 || idle.Gap != nil || idle.NextAfter != 1 || idle.Ended || time.Since(t0) < 300*time.Millisecond {
		t.Fatalf("idle poll after %v: %+v", time.Since(t0), idle)
	}

	// A long poll parked on a running execution returns on new output.
	ch := e.pollAsync(t, tok, "lp", 1, "30s")
	time.Sleep(100 * time.Millisecond) // let it park; it must return promptly either way
	e.must(t, 200, "POST", "/v1/executions/lp/input", tok, apiInput{Data: []byte("a\n")}, nil)
	p := <-ch
	if p.err != nil || p.status != 200 || p.elapsed > 10*time.Second || len(p.page.Events) == 0 || p.page.Events[0].Kind != "output" {
		t.Fatalf("poll for output: %d %v after %v: %s", p.status, p.err, p.elapsed, p.body)
	}
	out, after := string(decodeData(t, p.page.Events)), p.page.NextAfter
	for i := 0; out != "got=a\n"; i++ {
		if i == 10 || len(out) > len("got=a\n") {
			t.Fatalf("output %q", out)
		}
		page := e.poll(t, tok, "lp", after, "10s")
		out, after = out+string(decodeData(t, page.Events)), page.NextAfter
	}

	// And on exit.
	ch = e.pollAsync(t, tok, "lp", after, "30s")
	time.Sleep(100 * time.Millisecond)
	e.must(t, 200, "POST", "/v1/executions/lp/input", tok, apiInput{Offset: 2, Data: []byte("b\n")}, nil)
	p = <-ch
	if p.err != nil || p.status != 200 || p.elapsed > 10*time.Second || len(p.page.Events) == 0 {
		t.Fatalf("poll for exit: %d %v after %v: %s", p.status, p.err, p.elapsed, p.body)
	}
	last := p.page.Events[len(p.page.Events)-1]
	if !p.page.Ended || p.page.Status != session.StatusExited || last.Exit == nil || last.Exit.Code != 4 || p.page.NextAfter != last.Seq {
		t.Fatalf("poll for exit: %+v", p.page)
	}

	// After the end, a poll returns at once whatever it may wait.
	t0 = time.Now()
	if done := e.poll(t, tok, "lp", last.Seq, "30s"); !done.Ended || len(done.Events) != 0 || time.Since(t0) > 10*time.Second {
		t.Fatalf("poll past the end after %v: %+v", time.Since(t0), done)
	}
}

func decodeData(t *testing.T, evs []apiEvent) []byte {
	t.Helper()
	var out []byte
	for _, ev := range evs {
		b, err := base64.StdEncoding.DecodeString(ev.Data)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b...)
	}
	return out
}

func TestHTTPInputAppliedOnceByOffset(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t, nil)
	tok := e.token(t, "acme", allScopes...)
	e.must(t, 201, "POST", "/v1/executions", tok, shStart("cat", "cat"), nil)

	steps := []struct {
		body apiInput
		want uint64
	}{
		{apiInput{Offset: 0, Data: []byte("hello\n")}, 6},
		{apiInput{Offset: 0, Data: []byte("hello\n")}, 6},    // a retry: dropped
		{apiInput{Offset: 3, Data: []byte("lo\nabc\n")}, 10}, // an overlap: only "abc\n" applies
		{apiInput{Offset: 10}, 10},                           // no data: only the offset
	}
	for _, s := range steps {
		var got struct {
			InputOffset uint64 `json:"input_offset"`
		}
		e.must(t, 200, "POST", "/v1/executions/cat/input", tok, s.body, &got)
		if got.InputOffset != s.want {
			t.Fatalf("input %+v: offset %d, want %d", s.body, got.InputOffset, s.want)
		}
	}
	e.fails(t, 400, "input_offset", "POST", "/v1/executions/cat/input", tok, apiInput{Offset: 99, Data: []byte("x")})
	e.must(t, 200, "POST", "/v1/executions/cat/input", tok, apiInput{CloseStdin: true}, nil)

	tr := e.readAll(t, tok, "cat")
	if tr.out != "hello\nabc\n" || tr.exit == nil || tr.exit.Code != 0 {
		t.Fatalf("printed %+v", tr)
	}
	e.fails(t, 409, "not_running", "POST", "/v1/executions/cat/input", tok, apiInput{Offset: 10, Data: []byte("late")})
}

func TestHTTPCancel(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t, nil)
	tok := e.token(t, "acme", allScopes...)
	e.must(t, 201, "POST", "/v1/executions", tok, shStart("sleeper", "sleep 30"), nil)
	var info session.Info
	e.must(t, 202, "POST", "/v1/executions/sleeper/cancel", tok, nil, &info)
	if info.ID != "sleeper" {
		t.Fatalf("cancel answered %+v", info)
	}
	tr := e.readAll(t, tok, "sleeper")
	if tr.status != session.StatusCancelled || tr.exit == nil || tr.exit.Reason != "cancelled" {
		t.Fatalf("printed %+v", tr)
	}
	e.fails(t, 409, "not_running", "POST", "/v1/executions/sleeper/cancel", tok, nil)
}

func TestHTTPTenantsAreIsolated(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t, nil)
	acme := e.token(t, "acme", allScopes...)
	e.must(t, 201, "POST", "/v1/executions", acme, shStart("secret-job", "sleep 30"), nil)
	defer e.must(t, 202, "POST", "/v1/executions/secret-job/cancel", acme, nil, nil)

	globex := e.token(t, "globex", allScopes...)
	requests := []struct {
		method, path string
		body         any
	}{
		{"GET", "/v1/executions/%s", nil},
		{"GET", "/v1/executions/%s/events?wait=1s", nil},
		{"POST", "/v1/executions/%s/input", apiInput{Data: []byte("x")}},
		{"POST", "/v1/executions/%s/cancel", nil},
	}
	for _, r := range requests {
		status, _, theirs := e.call(t, r.method, fmt.Sprintf(r.path, "secret-job"), globex, r.body)
		unknownStatus, _, unknown := e.call(t, r.method, fmt.Sprintf(r.path, "never-existed"), globex, r.body)
		if status != 404 || unknownStatus != 404 || strings.Contains(string(theirs), "acme") ||
			strings.ReplaceAll(string(theirs), "secret-job", "ID") != strings.ReplaceAll(string(unknown), "never-existed", "ID") {
			t.Errorf("%s %s: another tenant's id answered %d %s, an unknown one %d %s", r.method, r.path, status, theirs, unknownStatus, unknown)
		}
	}
	var list struct{ Executions []session.Info }
	e.must(t, 200, "GET", "/v1/executions", globex, nil, &list)
	if list.Executions == nil || len(list.Executions) != 0 {
		t.Fatalf("globex lists %+v", list)
	}
}

func TestHTTPRefusals(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t, func(c *Config) { c.MaxMessageBytes = 1024; c.QueryToken = true })
	all := e.token(t, "acme", allScopes...)
	// The job outlives the test however slow the machine (not ended by the
	// 2-minute default timeout of a batch execution); cancelled at the end.
	job := shStart("job", "sleep 3600")
	job.TimeoutMS = time.Hour.Milliseconds()
	e.must(t, 201, "POST", "/v1/executions", all, job, nil)
	t.Cleanup(func() { // after the parallel subtests, when t.Context is done
		if status, _, b, err := e.do(context.Background(), "POST", "/v1/executions/job/cancel", all, nil); status != 202 {
			info, _ := e.sup.Get("acme", "job")
			t.Errorf("cancel: %d %s %v; the job: %+v", status, b, err, info.Result)
		}
	})
	attachOnly := e.token(t, "acme", auth.ScopeAttach)
	createOnly := e.token(t, "acme", auth.ScopeCreate)
	noScope := e.token(t, "acme")
	big := strings.Repeat("x", 2048)

	cases := []struct {
		name, method, path, token string
		body                      any
		status                    int
		code                      string
	}{
		{"create needs exec:create", "POST", "/v1/executions", attachOnly, shStart("", "true"), 403, "forbidden"},
		{"list needs exec:attach", "GET", "/v1/executions", createOnly, nil, 403, "forbidden"},
		{"get needs exec:attach", "GET", "/v1/executions/job", noScope, nil, 403, "forbidden"},
		{"events need exec:attach", "GET", "/v1/executions/job/events", createOnly, nil, 403, "forbidden"},
		{"input needs exec:write", "POST", "/v1/executions/job/input", attachOnly, apiInput{Data: []byte("x")}, 403, "forbidden"},
		{"cancel needs exec:write", "POST", "/v1/executions/job/cancel", attachOnly, nil, 403, "forbidden"},
		{"unknown field", "POST", "/v1/executions", all, `{"command":"/bin/sh","attach":true}`, 400, "bad_request"},
		{"unknown input field", "POST", "/v1/executions/job/input", all, `{"ofset":0}`, 400, "bad_request"},
		{"malformed json", "POST", "/v1/executions", all, `{"command":`, 400, "bad_request"},
		{"trailing data", "POST", "/v1/executions", all, `{} {}`, 400, "bad_request"},
		{"empty body", "POST", "/v1/executions", all, "", 400, "bad_request"},
		{"bad base64", "POST", "/v1/executions/job/input", all, `{"data":"***"}`, 400, "bad_request"},
		{"oversized start", "POST", "/v1/executions", all, apiStart{Env: map[string]string{"X": big}}, 413, "too_large"},
		{"oversized input", "POST", "/v1/executions/job/input", all, apiInput{Data: []byte(big)}, 413, "too_large"},
		{"command not allowed", "POST", "/v1/executions", all, apiStart{Command: "/usr/bin/python3"}, 400, "invalid_spec"},
		{"invalid id", "POST", "/v1/executions", all, shStart("-bad id", "true"), 400, "invalid_id"},
		{"wait too long", "GET", "/v1/executions/job/events?wait=61s", all, nil, 400, "bad_request"},
		{"negative wait", "GET", "/v1/executions/job/events?wait=-1s", all, nil, 400, "bad_request"},
		{"wait without unit", "GET", "/v1/executions/job/events?wait=25", all, nil, 400, "bad_request"},
		{"wait garbage", "GET", "/v1/executions/job/events?wait=soon", all, nil, 400, "bad_request"},
		{"negative after", "GET", "/v1/executions/job/events?after=-1", all, nil, 400, "bad_request"},
		{"unknown id", "GET", "/v1/executions/nope", all, nil, 404, "not_found"},
		{"input offset ahead", "POST", "/v1/executions/job/input", all, `{"close_stdin":true,"offset":5}`, 400, "input_offset"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e.fails(t, c.status, c.code, c.method, c.path, c.token, c.body)
		})
	}
	t.Run("methods", func(t *testing.T) {
		t.Parallel()
		for _, r := range [][2]string{{"DELETE", "/v1/executions/job"}, {"PUT", "/v1/executions"}, {"GET", "/v1/executions/job/cancel"}} {
			if status, _, _ := e.call(t, r[0], r[1], all, nil); status != http.StatusMethodNotAllowed {
				t.Errorf("%s %s: status %d", r[0], r[1], status)
			}
		}
	})
}

func TestHTTPUnauthorizedSaysNothingMore(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t, func(c *Config) { c.QueryToken = true })
	good := e.token(t, "acme", allScopes...)
	expired, _ := e.authn.Mint(auth.Claims{Subject: "u", Tenant: "acme", Scopes: map[string]bool{auth.ScopeAttach: true},
		IssuedAt: time.Now().Add(-2 * time.Hour), ExpiresAt: time.Now().Add(-time.Hour)})
	const want = `{"error":"unauthorized","message":"a valid bearer token is required"}` + "\n"
	cases := []struct {
		name, path string
		header     http.Header
	}{
		{"no token", "/v1/executions", nil},
		{"garbage", "/v1/executions", http.Header{"Authorization": {"Bearer x.y.z"}}},
		{"expired", "/v1/executions", http.Header{"Authorization": {"Bearer " + expired}}},
		{"basic scheme", "/v1/executions", http.Header{"Authorization": {"Basic " + good}}},
		{"bare token", "/v1/executions", http.Header{"Authorization": {good}}},
		{"oversized", "/v1/executions", http.Header{"Authorization": {"Bearer " + strings.Repeat("a", 9000)}}},
		{"query token", "/v1/executions?token=" + good, nil},
		{"subprotocol token", "/v1/executions", http.Header{"Sec-WebSocket-Protocol": {wire.Subprotocol + ", " + wire.BearerPrefix + good}}},
		{"events", "/v1/executions/x/events?wait=30s", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", e.api.URL+c.path, nil)
			for k, v := range c.header {
				req.Header[k] = v
			}
			resp, err := e.api.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 401 || string(b) != want || resp.Header.Get("WWW-Authenticate") == "" {
				t.Fatalf("status %d, body %q", resp.StatusCode, b)
			}
		})
	}
}

func TestHTTPStartRateLimited(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t, func(c *Config) { c.StartsPerMinute = 2 })
	tok := e.token(t, "acme", allScopes...)
	bad := apiStart{Command: "/usr/bin/python3"} // refused after the limiter: no sandbox needed
	e.fails(t, 400, "invalid_spec", "POST", "/v1/executions", tok, bad)
	e.fails(t, 400, "invalid_spec", "POST", "/v1/executions", tok, bad)
	e.fails(t, 429, "rate_limited", "POST", "/v1/executions", tok, bad)
	// Another subject has its own bucket.
	e.fails(t, 400, "invalid_spec", "POST", "/v1/executions", e.token(t, "globex", allScopes...), bad)
}

// TestDefaultStartRateKeepsAnAgentsPace: at the defaults, an agent's
// burst of short commands (each start about 20 ms here, so 600 in about
// 15 s) is not refused, and the limit still holds past the burst. At 60
// a minute, the 61st start of an agent running commands one after the
// other was refused, and it went on at one a second.
func TestDefaultStartRateKeepsAnAgentsPace(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t, nil)
	tok := e.token(t, "acme", allScopes...)
	bad := apiStart{Command: "/usr/bin/python3"} // refused after the limiter: no sandbox needed
	allowed, start := 0, time.Now()
	for range DefaultStartsPerMinute + 1000 { // a start is far quicker than the refill's 100 ms
		status, _, body, err := e.do(t.Context(), "POST", "/v1/executions", tok, bad)
		if err != nil {
			t.Fatal(err)
		}
		if status == 429 {
			break
		}
		if status != 400 {
			t.Fatalf("start %d: %d %s", allowed+1, status, body)
		}
		allowed++
	}
	// The burst, and what the bucket refilled meanwhile (10 a second).
	most := DefaultStartsPerMinute + int(time.Since(start).Seconds()*DefaultStartsPerMinute/60) + 1
	if allowed < 500 || allowed > most {
		t.Errorf("%d starts in a row allowed at the defaults, want at least 500 and at most %d (the burst and its refill)", allowed, most)
	}
}

func TestAPISubjectLimitsDropIdleBuckets(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		l := newSubjectLimits(1, 1) // refills in 1s
		a := auth.Claims{Tenant: "acme", Subject: "a"}
		if !l.allow(a) || l.allow(a) {
			t.Fatal("a bucket of one token allowed twice or never")
		}
		for i := range minSubjectSweep - 1 { // with a: the map is at its sweep size
			l.allow(auth.Claims{Tenant: "acme", Subject: fmt.Sprint("s", i)})
		}
		time.Sleep(2 * time.Second)
		l.allow(auth.Claims{Tenant: "acme", Subject: "late"})
		if n := len(l.m); n != 1 {
			t.Fatalf("%d buckets kept after all went idle, want 1", n)
		}
		if !l.allow(a) {
			t.Fatal("a refilled subject is refused")
		}
	})
}

// TestHTTPEventsPagesAndGaps: with flow live, a poller that comes late
// is told exactly what it lost; with the default flow, a writer's polls
// are its acknowledgements and it loses nothing though the program
// prints 3 MB through a 2 MiB ring.
func TestHTTPEventsPagesAndGaps(t *testing.T) {
	t.Parallel()
	for _, flow := range []string{wire.FlowLive, wire.FlowHold} {
		t.Run(flow, func(t *testing.T) {
			t.Parallel()
			e := newAPIEnv(t, func(c *Config) { c.Ring = replay.Config{MaxBytes: 2 << 20, MaxEvents: 1 << 16} })
			tok := e.token(t, "acme", allScopes...)
			const total = 3_000_000
			start := shStart("big", fmt.Sprintf("yes 0123456789abcdef | head -c %d", total))
			start.Flow = flow
			e.must(t, 201, "POST", "/v1/executions", tok, start, nil)
			if flow == wire.FlowLive {
				waitEnded(t, e, tok, "big", total)
			}
			got, lost, pages := pollAll(t, e, tok, "big")
			switch {
			case flow == wire.FlowHold && (lost != 0 || got != total):
				t.Fatalf("held: %d bytes read, %d lost; want all %d", got, lost, total)
			case flow == wire.FlowLive && (lost == 0 || got+lost != total || pages < 2):
				t.Fatalf("live: %d bytes read + %d lost in %d pages, want %d", got, lost, pages, total)
			}
		})
	}
}

// waitEnded waits for execution id to end, having printed total bytes.
func waitEnded(t *testing.T, e *apiEnv, tok, id string, total int64) {
	t.Helper()
	var info session.Info
	e.must(t, 200, "GET", "/v1/executions/"+id, tok, nil, &info)
	// Each poll returns as soon as there is newer output, so a count alone
	// says nothing about time: the bound is a deadline, and a count high
	// enough for it.
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; info.Result == nil; i++ {
		if i == 100_000 || time.Now().After(deadline) {
			t.Fatalf("%s did not end within 30s (%d polls)", id, i)
		}
		e.must(t, 200, "GET", fmt.Sprintf("/v1/executions/%s/events?after=%d&incarnation=%s&wait=1s", id, info.LastSeq, info.Incarnation), tok, nil, nil)
		e.must(t, 200, "GET", "/v1/executions/"+id, tok, nil, &info)
	}
	if info.Result.Stdout.Original != total {
		t.Fatalf("the execution printed %d bytes", info.Result.Stdout.Original)
	}
}

// pollAll polls an execution's events to its end, in pages of at most 1
// MiB of output; only the first may have a gap.
func pollAll(t *testing.T, e *apiEnv, tok, id string) (got, lost uint64, pages int) {
	t.Helper()
	after := uint64(0)
	for ended := false; !ended; pages++ {
		if pages == 1000 {
			t.Fatalf("no end after %d pages", pages)
		}
		page := e.poll(t, tok, id, after, "10s")
		if page.Gap != nil {
			if pages != 0 || page.Gap.From != 1 || page.Gap.To <= 1 {
				t.Fatalf("page %d: gap %+v", pages, page.Gap)
			}
			lost = page.Gap.Bytes
		}
		data := decodeData(t, page.Events)
		if len(data) > apiMaxPollDataSize || (page.NextAfter <= after && !page.Ended) {
			t.Fatalf("page %d: %d bytes, next_after %d after %d", pages, len(data), page.NextAfter, after)
		}
		got += uint64(len(data))
		after, ended = page.NextAfter, page.Ended
	}
	return got, lost, pages
}

// TestStartRateIsPerSubjectAcrossConnectionsAndHTTP: new connections
// and the HTTP API draw on the subject's one budget of starts.
func TestStartRateIsPerSubjectAcrossConnectionsAndHTTP(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t, func(c *Config) { c.StartsPerMinute = 3 })
	tok := e.token(t, "acme", allScopes...)
	bad := wire.Request{Type: wire.TypeStart, Command: "/usr/bin/python3"} // refused after the limiter: no sandbox needed
	wsStart := func(req string) wire.Message {
		c := e.dial(t, tok)
		defer c.close()
		bad.Req = req
		c.send(t, bad)
		m, _ := c.expect(t, wire.MsgError)
		return m
	}
	for i := range 2 {
		if m := wsStart(fmt.Sprint(i)); m.Error != "invalid_spec" {
			t.Fatalf("start %d on a new connection: %+v", i, m)
		}
	}
	e.fails(t, 400, "invalid_spec", "POST", "/v1/executions", tok, apiStart{Command: bad.Command})
	if m := wsStart("3"); m.Error != "rate_limited" {
		t.Fatalf("fourth start in a minute, on a fresh connection: %+v, want rate_limited", m)
	}
	e.fails(t, 429, "rate_limited", "POST", "/v1/executions", tok, apiStart{Command: bad.Command})
	// Another subject of the same tenant has its own budget.
	other, err := e.authn.Mint(auth.Claims{Subject: "someone-else", Tenant: "acme", Scopes: map[string]bool{auth.ScopeCreate: true}, ExpiresAt: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	e.fails(t, 400, "invalid_spec", "POST", "/v1/executions", other, apiStart{Command: bad.Command})
}

// subjectHeld is how much of the subject's connection budget is in use.
func (s *Server) subjectHeld(c auth.Claims) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.subjects[c.Tenant+"\x00"+c.Subject]
}

// TestLongPollsShareTheSubjectsConnectionBudget: WebSocket connections
// and held long polls of one subject count against one budget; beyond it
// a long poll is refused at once with 429, and a finished one gives its
// place back.
func TestLongPollsShareTheSubjectsConnectionBudget(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t, func(c *Config) { c.MaxConnsPerSubject = 2 })
	tok := e.token(t, "acme", allScopes...)
	claims := auth.Claims{Tenant: "acme", Subject: "user-acme"}
	e.must(t, 201, "POST", "/v1/executions", tok, shStart("quiet", "read x"), nil)
	ws := e.dial(t, tok)
	defer ws.close()
	held := e.pollAsync(t, tok, "quiet", 1, "60s")
	if !sandboxtest.Eventually(t, 20*time.Second, func() bool { return e.srv.subjectHeld(claims) >= 2 }) {
		t.Fatalf("a held long poll is not counted: %d of the subject's budget in use, want 2", e.srv.subjectHeld(claims))
	}
	p := <-e.pollAsync(t, tok, "quiet", 1, "60s")
	if p.err != nil || p.status != http.StatusTooManyRequests || !strings.Contains(string(p.body), `"too_many_connections"`) {
		t.Fatalf("a long poll beyond the budget: %d %v after %v: %s", p.status, p.err, p.elapsed, p.body)
	}
	if c, resp, err := e.dialRaw(tok, nil); err == nil || status(resp) != http.StatusTooManyRequests {
		if c != nil {
			c.close()
		}
		t.Fatalf("a connection beyond the budget: %v, status %d", err, status(resp))
	}
	// A poll that does not wait holds nothing and is answered.
	e.poll(t, tok, "quiet", 0, "0")
	e.must(t, 200, "POST", "/v1/executions/quiet/input", tok, apiInput{Data: []byte("\n")}, nil)
	if p := <-held; p.err != nil || p.status != 200 {
		t.Fatalf("held poll: %d %v: %s", p.status, p.err, p.body)
	}
	if !sandboxtest.Eventually(t, 20*time.Second, func() bool { return e.srv.subjectHeld(claims) == 1 }) {
		t.Fatalf("a finished long poll still holds its place: %d in use", e.srv.subjectHeld(claims))
	}
}

// TestOutOfDescriptorsIsCapacity: running out of file descriptors in a
// start (the workspace, the sandbox) is answered 429 capacity with a
// message that names no host path, on the HTTP API and the WebSocket.
func TestOutOfDescriptorsIsCapacity(t *testing.T) {
	t.Parallel()
	srv := &Server{log: slog.New(slog.DiscardHandler)}
	a := &httpAPI{s: srv}
	for _, err := range []error{
		fmt.Errorf("gateway: open workspace root: %w", &os.PathError{Op: "open", Path: "/srv/secret-root", Err: syscall.EMFILE}),
		fmt.Errorf("%w: bind: %w", sandbox.ErrInvalidPolicy, &os.PathError{Op: "open", Path: "/srv/secret-root", Err: syscall.ENFILE}),
	} {
		w := httptest.NewRecorder()
		a.fail(w, httptest.NewRequest("POST", "/v1/executions", nil), auth.Claims{}, err)
		var body apiErrorBody
		json.Unmarshal(w.Body.Bytes(), &body)
		if w.Code != http.StatusTooManyRequests || body.Error != "capacity" || strings.Contains(body.Message, "secret-root") {
			t.Errorf("%v: HTTP %d %+v, want 429 capacity without the path", err, w.Code, body)
		}
		c := &conn{s: srv, log: srv.log}
		if code, msg := c.errorText(wire.Request{Type: wire.TypeStart}, err); code != "capacity" || strings.Contains(msg, "secret-root") {
			t.Errorf("%v: WebSocket %s %q, want capacity without the path", err, code, msg)
		}
	}
}

// TestHTTPBodyReadIsBounded: a client that sends part of a body and
// stalls is answered 408 after the read timeout instead of holding the
// request, and its connection, forever.
func TestHTTPBodyReadIsBounded(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t, func(c *Config) { c.RequestReadTimeout = 200 * time.Millisecond })
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(e.api.URL, "http://"), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /v1/executions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"id\":", e.token(t, "acme", allScopes...))
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled body: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(b), `"request_timeout"`) {
		t.Fatalf("stalled body: %d %s", resp.StatusCode, b)
	}
}

// TestHTTPReadTimeoutSparesLongPollsAndWebSockets: the body bound does
// not end a long poll that waits longer, nor a WebSocket.
func TestHTTPReadTimeoutSparesLongPollsAndWebSockets(t *testing.T) {
	t.Parallel()
	e := newAPIEnv(t, func(c *Config) { c.RequestReadTimeout = 100 * time.Millisecond })
	tok := e.token(t, "acme", allScopes...)
	e.must(t, 201, "POST", "/v1/executions", tok, shStart("lp", "read x"), nil)
	if p := e.poll(t, tok, "lp", 1, "500ms"); len(p.Events) != 0 || p.Ended {
		t.Fatalf("long poll %+v", p)
	}
	ws := e.dial(t, tok)
	defer ws.close()
	time.Sleep(300 * time.Millisecond) // longer than the bound, to show it does not apply
	ws.send(t, wire.Request{Type: wire.TypePing, Req: "p"})
	ws.expect(t, wire.MsgPong)
	e.must(t, 202, "POST", "/v1/executions/lp/cancel", tok, nil, nil)
}
