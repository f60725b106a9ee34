package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// dapClient speaks the Debug Adapter Protocol: JSON bodies after a
// Content-Length header.
type dapClient struct {
	t   *testing.T
	c   net.Conn
	r   *bufio.Reader
	seq int
}

type dapMessage struct {
	Seq        int             `json:"seq"`
	Type       string          `json:"type"`
	Command    string          `json:"command,omitempty"`
	Event      string          `json:"event,omitempty"`
	RequestSeq int             `json:"request_seq,omitempty"`
	Success    bool            `json:"success,omitempty"`
	Message    string          `json:"message,omitempty"`
	Body       json.RawMessage `json:"body,omitempty"`
	Arguments  any             `json:"arguments,omitempty"`
}

// send sends a request and returns its seq.
func (d *dapClient) send(command string, args any) int {
	d.t.Helper()
	d.seq++
	b, _ := json.Marshal(dapMessage{Seq: d.seq, Type: "request", Command: command, Arguments: args})
	if _, err := fmt.Fprintf(d.c, "Content-Length: %d\r\n\r\n%s", len(b), b); err != nil {
		d.t.Fatalf("DAP %s: %v", command, err)
	}
	return d.seq
}

// next reads the next message.
func (d *dapClient) next() dapMessage {
	d.t.Helper()
	d.c.SetReadDeadline(time.Now().Add(60 * time.Second))
	n := -1
	for {
		line, err := d.r.ReadString('\n')
		if err != nil {
			d.t.Fatalf("DAP read: %v", err)
		}
		line = strings.TrimSpace(line)
		if line == "" && n >= 0 {
			break
		}
		if v, ok := strings.CutPrefix(line, "Content-Length: "); ok {
			n, _ = strconv.Atoi(v)
		}
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(d.r, b); err != nil {
		d.t.Fatalf("DAP read: %v", err)
	}
	var m dapMessage
	json.Unmarshal(b, &m)
	return m
}

// await reads until the response to seq or the event named, whichever
// is asked ("" for either kind), and returns it.
func (d *dapClient) await(seq int, event string) dapMessage {
	d.t.Helper()
	for range 200 {
		m := d.next()
		if seq != 0 && m.Type == "response" && m.RequestSeq == seq {
			if !m.Success {
				d.t.Fatalf("DAP %s refused: %s", m.Command, m.Message)
			}
			return m
		}
		if event != "" && m.Type == "event" && m.Event == event {
			return m
		}
	}
	d.t.Fatalf("DAP: no answer to %d / %q in 200 messages", seq, event)
	return dapMessage{}
}

// TestForwardDrivesADebugger: debugpy listens in a sandbox; a DAP client
// on the host reaches it through termgate forward, sets a breakpoint,
// lets the program run to it, reads a variable, and lets it finish.
func TestForwardDrivesADebugger(t *testing.T) {
	t.Parallel()
	if err := exec.Command("/usr/bin/python3", "-c", "import debugpy").Run(); err != nil {
		sandboxtest.Unavailable(t, "no debugpy (python3-debugpy) for the debugger test")
	}
	g := startGateway(t)
	tok := g.token(t, "acme", allScopes+" exec:forward")
	prog := "x = 41\ny = x + 1\nprint(\"done\", y, flush=True)\n"
	script := fmt.Sprintf("printf '%%s' '%s' > /tmp/prog.py && exec /usr/bin/python3 -m debugpy --listen 127.0.0.1:5678 --wait-for-client /tmp/prog.py", prog)
	out := make(chan string, 1)
	go func() {
		_, stdout, stderr := runCLI(t, "", "run", "--url", g.url, "--token", tok, "--id", "debugged", "--", "/bin/sh", "-c", script)
		out <- stdout + stderr
	}()
	if !sandboxtest.Eventually(t, 60*time.Second, func() bool {
		code, ports, _ := runCLI(t, "", "ports", "--url", g.url, "--token", tok, "debugged")
		return code == 0 && strings.Contains(ports, "5678\t")
	}) {
		t.Fatal("debugpy never listened")
	}
	addr, _ := forwardCLI(t, "--url", g.url, "--token", tok, "debugged", "0:5678")
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	d := &dapClient{t: t, c: c, r: bufio.NewReader(c)}
	d.await(d.send("initialize", map[string]any{"adapterID": "python", "clientID": "termgate-test", "linesStartAt1": true, "columnsStartAt1": true, "pathFormat": "path"}), "")
	d.send("attach", map[string]any{"justMyCode": false})
	d.await(0, "initialized")
	d.await(d.send("setBreakpoints", map[string]any{"source": map[string]string{"path": "/tmp/prog.py"}, "breakpoints": []map[string]int{{"line": 2}}}), "")
	d.await(d.send("configurationDone", nil), "")
	stopped := d.await(0, "stopped")
	var st struct {
		ThreadID int `json:"threadId"`
	}
	json.Unmarshal(stopped.Body, &st)
	var frames struct {
		StackFrames []struct {
			ID   int `json:"id"`
			Line int `json:"line"`
		} `json:"stackFrames"`
	}
	json.Unmarshal(d.await(d.send("stackTrace", map[string]int{"threadId": st.ThreadID}), "").Body, &frames)
	if len(frames.StackFrames) == 0 || frames.StackFrames[0].Line != 2 {
		t.Fatalf("stopped at %+v, want line 2", frames.StackFrames)
	}
	var scopes struct {
		Scopes []struct {
			Name string `json:"name"`
			Ref  int    `json:"variablesReference"`
		} `json:"scopes"`
	}
	json.Unmarshal(d.await(d.send("scopes", map[string]int{"frameId": frames.StackFrames[0].ID}), "").Body, &scopes)
	var x string
	for _, s := range scopes.Scopes {
		var vars struct {
			Variables []struct{ Name, Value string } `json:"variables"`
		}
		json.Unmarshal(d.await(d.send("variables", map[string]int{"variablesReference": s.Ref}), "").Body, &vars)
		for _, v := range vars.Variables {
			if v.Name == "x" {
				x = v.Value
			}
		}
	}
	if x != "41" {
		t.Errorf("x read through the debugger: %q, want 41", x)
	}
	d.send("continue", map[string]int{"threadId": st.ThreadID})
	select {
	case o := <-out:
		if !strings.Contains(o, "done 42") {
			t.Errorf("the program's output: %q", o)
		}
	case <-time.After(60 * time.Second):
		t.Error("the program did not finish after continue")
	}
}
