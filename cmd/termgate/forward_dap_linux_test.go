package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// dapClient speaks the Debug Adapter Protocol: JSON bodies after a
// Content-Length header.
type dapClient struct {
	t      *testing.T
	c      net.Conn
	r      *bufio.Reader
	seq    int
	events []dapMessage // read while awaiting something else
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
// is asked ("" for either kind), and returns it. Events read meanwhile
// are kept for a later await: an adapter may send one before the
// response to the request that caused it.
func (d *dapClient) await(seq int, event string) dapMessage {
	d.t.Helper()
	for i, m := range d.events {
		if event != "" && m.Event == event {
			d.events = append(d.events[:i], d.events[i+1:]...)
			return m
		}
	}
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
		if m.Type == "event" {
			d.events = append(d.events, m)
		}
	}
	d.t.Fatalf("DAP: no answer to %d / %q in 200 messages", seq, event)
	return dapMessage{}
}

// variable waits until the program stops at line and returns the
// stopped thread and the value of name there, from the top frame's
// scopes.
func (d *dapClient) variable(t *testing.T, line int, name string) (threadID int, value string) {
	t.Helper()
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
	if len(frames.StackFrames) == 0 || frames.StackFrames[0].Line != line {
		t.Fatalf("stopped at %+v, want line %d", frames.StackFrames, line)
	}
	var scopes struct {
		Scopes []struct {
			Name string `json:"name"`
			Ref  int    `json:"variablesReference"`
		} `json:"scopes"`
	}
	json.Unmarshal(d.await(d.send("scopes", map[string]int{"frameId": frames.StackFrames[0].ID}), "").Body, &scopes)
	for _, s := range scopes.Scopes {
		var vars struct {
			Variables []struct{ Name, Value string } `json:"variables"`
		}
		json.Unmarshal(d.await(d.send("variables", map[string]int{"variablesReference": s.Ref}), "").Body, &vars)
		for _, v := range vars.Variables {
			if v.Name == name {
				value = v.Value
			}
		}
	}
	return st.ThreadID, value
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
	tid, x := d.variable(t, 2, "x")
	if x != "41" {
		t.Errorf("x read through the debugger: %q, want 41", x)
	}
	d.send("continue", map[string]int{"threadId": tid})
	select {
	case o := <-out:
		if !strings.Contains(o, "done 42") {
			t.Errorf("the program's output: %q", o)
		}
	case <-time.After(60 * time.Second):
		t.Error("the program did not finish after continue")
	}
}

// delveVersion is the dlv the debugger test installs through the Go
// module proxy.
const delveVersion = "v1.27.2"

// dlvProgram is what the dlv test debugs; x is 41 at line 7.
const dlvProgram = `package main

import "fmt"

func main() {
	x := 41
	y := x + 1
	fmt.Println("done", y)
}
`

// TestForwardDrivesDelve: dlv (installed through the Go module proxy)
// serves the Debug Adapter Protocol in a sandbox; a DAP client on the
// host launches a Go program through termgate forward, stops it at a
// breakpoint, reads a variable and lets it finish.
func TestForwardDrivesDelve(t *testing.T) {
	t.Parallel()
	goTool, err := exec.LookPath("go")
	sandboxtest.Need(t, "go", err)
	bin, src := t.TempDir(), t.TempDir()
	install := exec.Command(goTool, "install", "github.com/go-delve/delve/cmd/dlv@"+delveVersion)
	install.Env = append(os.Environ(), "GOBIN="+bin, "CGO_ENABLED=0", "GOFLAGS=")
	if out, err := install.CombinedOutput(); err != nil {
		sandboxtest.Unavailable(t, "dlv %s could not be installed: %v: %s", delveVersion, err, out)
	}
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte(dlvProgram), 0o644); err != nil {
		t.Fatal(err)
	}
	build := exec.Command(goTool, "build", "-gcflags", "all=-N -l", "-o", filepath.Join(bin, "prog"), "main.go")
	build.Dir = src
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GO111MODULE=off", "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the program: %v: %s", err, out)
	}
	g := startGateway(t, "--proc", "private") // dlv reads /proc/self/exe and its debuggee's /proc
	tok := g.token(t, "acme", allScopes+" exec:forward")
	// dlv runs with its default --only-same-user: it admits a connection
	// whose socket the sandbox's own user owns, which termgate's is.
	//
	// The tenant's workspace exists once it ran something: the debugger
	// and the program go there.
	if code, _, stderr := runCLI(t, "", "run", "--url", g.url, "--token", tok, "--", "/bin/sh", "-c", "true"); code != 0 {
		t.Fatalf("run: %d %s", code, stderr)
	}
	wss, err := filepath.Glob(filepath.Join(filepath.Dir(g.secretFile), "ws", "mnt", "*"))
	if err != nil || len(wss) != 1 {
		t.Fatalf("the tenant's workspace: %v, %v", wss, err)
	}
	ws := wss[0]
	for _, f := range []string{"dlv", "prog"} {
		b, err := os.ReadFile(filepath.Join(bin, f))
		if err == nil {
			err = os.WriteFile(filepath.Join(ws, f), b, 0o755)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	out := make(chan string, 1)
	go func() {
		_, stdout, stderr := runCLI(t, "", "run", "--url", g.url, "--token", tok, "--id", "delve", "--", "/bin/sh", "-c", "exec /workspace/dlv dap --listen 127.0.0.1:4444")
		out <- stdout + stderr
	}()
	if !sandboxtest.Eventually(t, 60*time.Second, func() bool {
		code, ports, _ := runCLI(t, "", "ports", "--url", g.url, "--token", tok, "delve")
		return code == 0 && strings.Contains(ports, "4444\t")
	}) {
		select {
		case o := <-out:
			t.Fatalf("dlv ended: %s", o)
		default:
		}
		t.Fatal("dlv never listened")
	}
	addr, fwdErr := forwardCLI(t, "--url", g.url, "--token", tok, "delve", "0:4444")
	defer func() {
		if t.Failed() {
			select {
			case o := <-out:
				t.Logf("dlv: %s", o)
			case <-time.After(5 * time.Second):
			}
			t.Logf("forward: %s", fwdErr)
		}
	}()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	d := &dapClient{t: t, c: c, r: bufio.NewReader(c)}
	d.await(d.send("initialize", map[string]any{"adapterID": "go", "clientID": "termgate-test", "linesStartAt1": true, "columnsStartAt1": true, "pathFormat": "path"}), "")
	d.await(d.send("launch", map[string]any{"mode": "exec", "program": "/workspace/prog"}), "")
	d.await(0, "initialized")
	d.await(d.send("setBreakpoints", map[string]any{"source": map[string]string{"path": filepath.Join(src, "main.go")}, "breakpoints": []map[string]int{{"line": 7}}}), "")
	d.await(d.send("configurationDone", nil), "")
	tid, x := d.variable(t, 7, "x")
	if x != "41" {
		t.Errorf("x read through dlv: %q, want 41", x)
	}
	d.await(d.send("continue", map[string]int{"threadId": tid}), "")
	d.await(0, "terminated")
	d.send("disconnect", map[string]bool{"terminateDebuggee": true})
	select {
	case o := <-out: // dlv ends with its client; the program wrote to dlv's output
		if !strings.Contains(o, "done 42") {
			t.Errorf("the program's output under dlv: %q", o)
		}
		out <- o // for the failure log
	case <-time.After(60 * time.Second):
		t.Error("dlv did not end after the program and its client")
	}
}
