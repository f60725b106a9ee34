package gateway

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/termgate/termgate/gateway/auth"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/sandbox"
	"github.com/termgate/termgate/session"
	"github.com/termgate/termgate/session/sessiontest"
)

// newRecordingEnv is an HTTP API over a fake launcher whose programs
// print a line, echo their input, and exit; recordings go to a
// directory of the test's unless off.
func newRecordingEnv(t *testing.T, off bool, tweak func(*Config)) *apiEnv {
	t.Helper()
	l := &sessiontest.Launcher{Script: func(p *sessiontest.Proc) sandbox.Exit {
		p.Out().Stdout.Write([]byte("hello €\r\n"))
		return sandbox.Exit{Code: 0, Exact: true}
	}}
	sc := session.Config{Launcher: l}
	if !off {
		sc.RecordingsDir = t.TempDir()
	}
	e := newEnvSession(t, sc, tweak)
	mux := http.NewServeMux()
	e.srv.apiRoutes(mux)
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return &apiEnv{testEnv: e, api: ts}
}

var recordScopes = append([]string{ScopeRecord}, allScopes...)

// ended waits for id's result through the API.
func ended(t *testing.T, e *apiEnv, tok, id string) session.Info {
	t.Helper()
	var info session.Info
	deadline := time.Now().Add(30 * time.Second) // a poll returns at once on new output
	for i := 0; ; i++ {
		e.must(t, 200, "GET", "/v1/executions/"+id, tok, nil, &info)
		if info.Result != nil {
			return info
		}
		if i == 100_000 || time.Now().After(deadline) {
			t.Fatalf("%s did not end within 30s (%d polls)", id, i)
		}
		e.must(t, 200, "GET", fmt.Sprintf("/v1/executions/%s/events?after=%d&incarnation=%s&wait=1s", id, info.LastSeq, info.Incarnation), tok, nil, nil)
	}
}

// TestHelloSaysRecording: a client can tell whether its record option
// will be honoured: the hello lists "record" only when recordings are on.
func TestHelloSaysRecording(t *testing.T) {
	t.Parallel()
	for _, off := range []bool{false, true} {
		got := slices.Contains(newRecordingEnv(t, off, nil).srv.hello().Features, wire.FeatureRecord)
		if got == off {
			t.Errorf("recordings off %v: hello lists record %v", off, got)
		}
	}
}

func TestRecordingRoute(t *testing.T) {
	t.Parallel()
	e := newRecordingEnv(t, false, nil)
	acme := e.token(t, "acme", recordScopes...)
	start := apiStart{ID: "rec", PTY: &wire.Size{Rows: 24, Cols: 80}, Record: true}
	e.must(t, 201, "POST", "/v1/executions", acme, start, nil)
	if info := ended(t, e, acme, "rec"); info.Result.Recording == nil || info.Result.Recording.Truncated {
		t.Errorf("result's recording %+v", info.Result.Recording)
	}
	status, h, body := e.call(t, "GET", "/v1/executions/rec/recording", acme, nil)
	if status != 200 || h.Get("Content-Type") != "application/x-asciicast" ||
		h.Get("Content-Disposition") != `attachment; filename="rec.cast"` {
		t.Fatalf("recording: %d %v", status, h)
	}
	if !strings.HasPrefix(string(body), `{"version":2,"width":80,"height":24,`) || !strings.Contains(string(body), `"o", "hello €\r\n"]`) {
		t.Errorf("recording %s", body)
	}

	// Another tenant's recording is unknown to it, like an unknown ID.
	globex := e.token(t, "globex", recordScopes...)
	theirs := e.fails(t, 404, wire.CodeNotFound, "GET", "/v1/executions/rec/recording", globex, nil)
	unknown := e.fails(t, 404, wire.CodeNotFound, "GET", "/v1/executions/never/recording", globex, nil)
	if strings.ReplaceAll(theirs.Message, "rec", "ID") != strings.ReplaceAll(unknown.Message, "never", "ID") {
		t.Errorf("another tenant's recording: %q, an unknown one's %q", theirs.Message, unknown.Message)
	}
	// No recording: 404.
	e.must(t, 201, "POST", "/v1/executions", acme, apiStart{ID: "plain"}, nil)
	e.fails(t, 404, wire.CodeNotFound, "GET", "/v1/executions/plain/recording", acme, nil)
	// Reading needs exec:attach.
	e.fails(t, 403, wire.CodeForbidden, "GET", "/v1/executions/rec/recording", e.token(t, "acme", auth.ScopeCreate), nil)
}

func TestRecordingNeedsTheScope(t *testing.T) {
	t.Parallel()
	e := newRecordingEnv(t, false, nil)
	tok := e.token(t, "acme", allScopes...)
	for _, body := range []apiStart{{ID: "a", Record: true}, {ID: "b", RecordInput: true}} {
		got := e.fails(t, 403, wire.CodeForbidden, "POST", "/v1/executions", tok, body)
		if !strings.Contains(got.Message, ScopeRecord) {
			t.Errorf("refusal %q", got.Message)
		}
	}
	// The WebSocket start is refused the same way.
	c := e.dial(t, tok)
	defer c.close()
	c.send(t, wire.Request{Type: wire.TypeStart, Req: "1", Record: true})
	if m, _ := c.expect(t, wire.MsgError); m.Error != wire.CodeForbidden || m.Req != "1" {
		t.Errorf("websocket start: %+v", m)
	}
	// A server without recordings says so.
	off := newRecordingEnv(t, true, nil)
	off.fails(t, 400, wire.CodeInvalidSpec, "POST", "/v1/executions", off.token(t, "acme", recordScopes...), apiStart{ID: "c", Record: true})
}

func TestRecordPolicyRecordsTenants(t *testing.T) {
	t.Parallel()
	e := newRecordingEnv(t, false, func(c *Config) { c.Record = RecordPolicy{Tenants: []string{"acme"}} })
	acme, globex := e.token(t, "acme", allScopes...), e.token(t, "globex", allScopes...)
	e.must(t, 201, "POST", "/v1/executions", acme, apiStart{ID: "x"}, nil)
	e.must(t, 201, "POST", "/v1/executions", globex, apiStart{ID: "x"}, nil)
	ended(t, e, acme, "x")
	ended(t, e, globex, "x")
	if status, _, body := e.call(t, "GET", "/v1/executions/x/recording", acme, nil); status != 200 || !strings.Contains(string(body), "hello") {
		t.Errorf("acme's recording: %d %s", status, body)
	}
	e.fails(t, 404, wire.CodeNotFound, "GET", "/v1/executions/x/recording", globex, nil)
}

func TestParseRecordPolicy(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want RecordPolicy
		bad  bool
	}{
		{"all", RecordPolicy{All: true}, false},
		{"none", RecordPolicy{}, false},
		{"", RecordPolicy{}, false},
		{"acme, globex", RecordPolicy{Tenants: []string{"acme", "globex"}}, false},
		{"acme,,globex", RecordPolicy{}, true},
	} {
		got, err := ParseRecordPolicy(c.in)
		if (err != nil) != c.bad || !c.bad && !reflect.DeepEqual(got, c.want) {
			t.Errorf("ParseRecordPolicy(%q) = %+v, %v", c.in, got, err)
		}
	}
}
