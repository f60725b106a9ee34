package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestServeReportsGuarantees: serve's startup log and /readyz name each
// guarantee and its state as this server keeps it, one the configuration
// turns off with its flag. On this host the pids controller exists, so
// the fallback asked for is not used and the ceiling is held.
func TestServeReportsGuarantees(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "--pids-fallback", "rlimit", "--memory", "0", "--proc", "none")
	r, err := http.Get(g.url + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(r.Body)
	r.Body.Close()
	for _, want := range []string{"ok\n", "guarantee isolation held\n", "guarantee pids_ceiling held\n", "guarantee workspace_quota ",
		// What the host could and this server does not ask for.
		"guarantee memory_ceiling off (--memory 0)\n", "guarantee private_proc off (--proc none)\n", "guarantee network_policies off (no --network-policy)\n"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/readyz %d %q, want %q in it", r.StatusCode, body, want)
		}
	}
	logs := g.logs.String()
	for _, want := range []string{`"msg":"guarantee","name":"isolation","state":"held"`, `"msg":"guarantee","name":"cpu_weight","state":"held"`,
		`"msg":"guarantee","name":"memory_ceiling","state":"off"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("serve's log lacks %s: %s", want, logs)
		}
	}
}
