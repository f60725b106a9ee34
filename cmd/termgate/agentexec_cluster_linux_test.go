package main

import (
	"fmt"
	"net/http"
	"testing"
)

// TestClusterAgentExec: agent execs through n0 of an execution n1 owns
// wait as long as their yield, beyond the nodes' peer timeout (2 s),
// which bounds an ordinary relayed answer: a write whose answer comes
// after 3 s, and a continue.
func TestClusterAgentExec(t *testing.T) {
	serveFromEnv()
	c := newCluster(t, 2)
	tok := gatewayUnderTest{secretFile: c.nodes[0].secretFile}.token(t, "acme", allScopes)
	var id string
	for i := 0; i < 8 && id == ""; i++ {
		status, got := c.nodes[0].api(t, http.MethodPost, "/v1/exec", tok, map[string]any{
			"id": fmt.Sprint("agent-", i), "command": "read line; sleep 3; echo got $line; sleep 3; echo end", "interactive": true, "yield_ms": 100})
		if status != http.StatusCreated || got["running"] != true {
			t.Fatalf("exec %d: %d %v", i, status, got)
		}
		if ownerOf(got["id"].(string)) == "n1" {
			id = got["id"].(string)
		}
	}
	if id == "" {
		t.Fatal("no key of eight ranked n1 first")
	}
	status, got := c.nodes[0].api(t, http.MethodPost, "/v1/executions/"+id+"/write", tok, map[string]any{"input": "x\n", "offset": 0, "yield_ms": 4500})
	if status != http.StatusOK || got["output"] != "got x\n" || got["running"] != true {
		t.Fatalf("a write through n0 answered after 3 s: %d %v", status, got)
	}
	status, got = c.nodes[0].api(t, http.MethodPost, "/v1/exec", tok, map[string]any{"id": id, "yield_ms": 20000})
	if status != http.StatusOK || got["output"] != "end\n" || got["running"] != false {
		t.Fatalf("a continue through n0 to the exit: %d %v", status, got)
	}
}
