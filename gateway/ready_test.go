package gateway

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/session"
	"github.com/termgate/termgate/session/sessiontest"
)

// TestReadyReflectsCapacity: /readyz answers 503 while the supervisor
// runs its maximum of executions, and ok again once one ended.
func TestReadyReflectsCapacity(t *testing.T) {
	t.Parallel()
	l := &sessiontest.Launcher{Script: sessiontest.UntilStopped}
	e := newEnvSession(t, session.Config{Launcher: l, MaxRunning: 1}, nil)
	ready := func() (int, string) {
		r, err := http.Get(e.http.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return r.StatusCode, string(b)
	}
	if code, _ := ready(); code != http.StatusOK {
		t.Fatalf("idle: %d, want 200", code)
	}
	c := e.dial(t, e.token(t, "acme", allScopes...))
	defer c.close()
	c.send(t, wire.Request{Type: wire.TypeStart, ID: "one", Command: "/bin/sh"})
	c.expect(t, wire.MsgStarted)
	if code, body := ready(); code != http.StatusServiceUnavailable || !strings.Contains(body, "1 of 1") {
		t.Fatalf("full: %d %q, want 503 naming 1 of 1", code, body)
	}
	if err := e.sup.Cancel("acme", "one"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for code, _ := ready(); code != http.StatusOK; code, _ = ready() {
		select {
		case <-ctx.Done():
			t.Fatalf("after the cancel: %d, want 200", code)
		case <-time.After(10 * time.Millisecond):
		}
	}
}
