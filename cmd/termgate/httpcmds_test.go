package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestLsMarksAPartialList: when some nodes did not answer, ls prints the
// executions it got, then names the silent nodes on stderr, and exits 0;
// a complete list prints no marker.
func TestLsMarksAPartialList(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, body, wantErr string
	}{
		{"partial", `{"executions":[{"id":"n0.abcdef~k1","status":"running","pty":true,"started":"2026-01-01T00:00:00Z","last_seq":3}],` +
			`"partial":true,"unreachable":["termgate-2","termgate-3"]}`, "termgate: partial list: termgate-2, termgate-3 did not answer\n"},
		{"partial without names", `{"executions":[{"id":"n0.abcdef~k1","status":"running"}],"partial":true}`,
			"termgate: partial list: some nodes did not answer\n"},
		{"control characters", `{"executions":[{"id":"n0.abcdef~k1","status":"running"}],"partial":true,"unreachable":["n2\u001b[2J"]}`,
			"termgate: partial list: n2?[2J did not answer\n"},
		{"complete", `{"executions":[{"id":"n0.abcdef~k1","status":"running"}]}`, ""},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/v1/executions" || r.Header.Get("Authorization") != "Bearer tok" {
				http.Error(w, "unexpected", http.StatusTeapot)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(c.body))
		}))
		code, stdout, stderr := runCLI(t, "", "ls", "--url", srv.URL, "--token", "tok")
		srv.Close()
		if code != 0 || stderr != c.wantErr {
			t.Errorf("%s: status %d, stderr %q; want 0 and %q", c.name, code, stderr, c.wantErr)
		}
		if !strings.Contains(stdout, "n0.abcdef~k1") || !strings.HasPrefix(stdout, "ID") {
			t.Errorf("%s: table %q lacks the execution", c.name, stdout)
		}
	}
}
