package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/termgate/termgate/gateway/wire"
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
			"id": fmt.Sprint("agent-", i), "command": "read line; sleep 3; echo got $line; read l2; sleep 3; echo end $l2", "interactive": true, "yield_ms": 100})
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
	// Over n0's WebSocket: a write relayed to n1 as an HTTP call, whose
	// answer comes after 3 s too.
	cl := c.dial(t, c.url(0), nil, 0)
	defer cl.Close()
	off := uint64(2)
	res, err := cl.Write(t.Context(), id, wire.WriteRequest{Input: "y\n", Offset: &off, Wait: wire.Wait{YieldMS: ptrTo(int64(20000))}})
	if err != nil || res.Output != "end y\n" || res.Running {
		t.Fatalf("a write over n0's WebSocket: %+v %v", res, err)
	}
	status, got = c.nodes[0].api(t, http.MethodPost, "/v1/exec", tok, map[string]any{"id": id, "yield_ms": 20000})
	if status != http.StatusOK || got["output"] != "" || got["running"] != false {
		t.Fatalf("a continue through n0 after the exit: %d %v", status, got)
	}
	// A keyed start over n0's WebSocket, equal to the one n1 holds, is
	// placed there and answered with that execution.
	key := id[strings.Index(id, "~")+1:]
	res, err = cl.Exec(t.Context(), wire.ExecRequest{ID: key, Command: "read line; sleep 3; echo got $line; read l2; sleep 3; echo end $l2", Interactive: true, Wait: wire.Wait{YieldMS: ptrTo(int64(100)), Seq: 1}})
	if err != nil || res.ID != id || res.Running || !strings.HasSuffix(res.Output, "end y\n") {
		t.Fatalf("the same keyed start over n0's WebSocket: %+v %v", res, err)
	}
}

func ptrTo[T any](v T) *T { return &v }
