package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/termgate/termgate/sandbox/sandboxtest"
)

var updateMCPTools = flag.Bool("update-mcp-tools", false, "rewrite docs/mcp-tools.json from the tools termgate mcp lists")

// mcpStdio runs termgate mcp in-process over pipes, as an agent runs it
// over its stdin and stdout, and connects the Go SDK's client to it.
func mcpStdio(t *testing.T, args ...string) *mcp.ClientSession {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"mcp"}, args...), inR, outW, io.Discard)
		outW.Close()
	}()
	c := mcp.NewClient(&mcp.Implementation{Name: "termgate-test", Version: "1"}, nil)
	s, err := c.Connect(t.Context(), &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		inW.Close()
		stop()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Error("termgate mcp did not end")
		}
	})
	return s
}

// callText calls a tool and returns its text, failing the test on a
// protocol error; isError says whether it was a tool error.
func callText(t *testing.T, s *mcp.ClientSession, tool string, args map[string]any) (text string, isError bool, structured map[string]any) {
	t.Helper()
	res, err := s.CallTool(t.Context(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text += tc.Text
		}
	}
	if m, ok := res.StructuredContent.(map[string]any); ok {
		structured = m
	}
	return text, res.IsError, structured
}

// TestMCPOverStdio: the Go SDK's client lists the tools, as documented,
// runs a command to its exit code, drives a Python REPL with write_stdin,
// cancels a command, reads its end with read_output, reads and writes a
// file, and gets the gateway's code in a tool error.
func TestMCPOverStdio(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	tok := g.token(t, "acme", allScopes+" files:read files:write")
	s := mcpStdio(t, "--url", g.url, "--token", tok)

	tools, err := s.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	checkMCPTools(t, tools.Tools)

	text, isErr, st := callText(t, s, "exec", map[string]any{"command": "echo hi; echo oops >&2; exit 4"})
	if isErr || !strings.Contains(text, "hi\n") || !strings.Contains(text, "oops\n") || !strings.HasSuffix(text, "[exit code 4 (exited)]\n") {
		t.Fatalf("exec: %v %q", isErr, text)
	}
	if st["running"] != false || st["exit"].(map[string]any)["code"] != 4.0 {
		t.Fatalf("exec's structured answer: %v", st)
	}

	text, _, st = callText(t, s, "exec", map[string]any{"command": "python3 -i -q", "interactive": true, "yield_ms": 300})
	id, _ := st["id"].(string)
	if st["running"] != true || id == "" || !strings.Contains(text, "still running as "+id) {
		t.Fatalf("a REPL: %q %v", text, st)
	}
	text, isErr, _ = callText(t, s, "write_stdin", map[string]any{"id": id, "input": "print(6 * 7)\n", "yield_ms": 1000})
	if isErr || !strings.Contains(text, "42\n") {
		t.Fatalf("write_stdin: %v %q", isErr, text)
	}
	text, isErr, _ = callText(t, s, "write_stdin", map[string]any{"id": id, "input": "import sys; sys.exit(5)\n", "yield_ms": 10000})
	if isErr || !strings.HasSuffix(text, "[exit code 5 (exited)]\n") {
		t.Fatalf("write_stdin to the end: %v %q", isErr, text)
	}

	_, _, st = callText(t, s, "exec", map[string]any{"command": "sleep 100", "yield_ms": 100})
	sleeper, _ := st["id"].(string)
	if text, isErr, _ = callText(t, s, "cancel", map[string]any{"id": sleeper}); isErr {
		t.Fatalf("cancel: %q", text)
	}
	text, _, _ = callText(t, s, "read_output", map[string]any{"id": sleeper, "yield_ms": 20000})
	if !strings.Contains(text, "(cancelled)]") {
		t.Fatalf("read_output after cancel: %q", text)
	}
	text, _, _ = callText(t, s, "list_executions", nil)
	if !strings.Contains(text, id+"\t") || !strings.Contains(text, sleeper+"\t") {
		t.Fatalf("list_executions: %q", text)
	}

	if text, isErr, _ = callText(t, s, "write_file", map[string]any{"path": "notes/a.txt", "content": "héllo\n", "mode": "0600"}); isErr {
		t.Fatalf("write_file: %q", text)
	}
	text, _, _ = callText(t, s, "exec", map[string]any{"command": "stat -c %a notes/a.txt; cat notes/a.txt"})
	if !strings.HasPrefix(text, "600\nhéllo\n") {
		t.Fatalf("the sandbox sees: %q", text)
	}
	if text, _, _ = callText(t, s, "read_file", map[string]any{"path": "notes/a.txt"}); text != "héllo\n" {
		t.Fatalf("read_file: %q", text)
	}
	if text, _, _ = callText(t, s, "list_files", map[string]any{"path": "notes"}); !strings.Contains(text, "a.txt") {
		t.Fatalf("list_files: %q", text)
	}

	text, isErr, _ = callText(t, s, "read_output", map[string]any{"id": "nothing-here"})
	if !isErr || !strings.HasPrefix(text, "not_found: ") {
		t.Fatalf("a tool error: %v %q", isErr, text)
	}
}

// checkMCPTools compares the tools listed with docs/mcp-tools.json.
func checkMCPTools(t *testing.T, tools []*mcp.Tool) {
	t.Helper()
	var names []string
	for _, tool := range tools {
		names = append(names, tool.Name)
	}
	want := []string{"cancel", "exec", "list_executions", "list_files", "preview_port", "read_file", "read_output", "write_file", "write_stdin"}
	if slices.Sort(names); !slices.Equal(names, want) {
		t.Fatalf("tools %q, want %q", names, want)
	}
	got, err := json.MarshalIndent(tools, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	file := filepath.Join("..", "..", "docs", "mcp-tools.json")
	if *updateMCPTools {
		os.WriteFile(file, got, 0o644)
	}
	if doc, _ := os.ReadFile(file); string(doc) != string(got) {
		t.Fatalf("the tools differ from docs/mcp-tools.json (go test ./cmd/termgate -run TestMCPOverStdio -update-mcp-tools rewrites it): %s", got)
	}
}

// TestMCPOverHTTP: termgate mcp --listen serves streamable HTTP to the Go
// SDK's client, with the client's own token; a request without one is
// refused before MCP.
func TestMCPOverHTTP(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	tok := g.token(t, "acme", allScopes)
	errR, errW := io.Pipe()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"mcp", "--url", g.url, "--listen", "127.0.0.1:0"}, strings.NewReader(""), io.Discard, errW)
	}()
	t.Cleanup(func() {
		stop()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Error("termgate mcp did not end")
		}
	})
	line, err := bufio.NewReader(errR).ReadString('\n')
	go io.Copy(io.Discard, errR)
	m := regexp.MustCompile(`(http://127\.0\.0\.1:\d+/mcp)`).FindStringSubmatch(line)
	if err != nil || m == nil {
		t.Fatalf("termgate mcp said %q (%v)", line, err)
	}
	resp, err := http.Post(m[1], "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("without a token: %s", resp.Status)
	}
	hc := &http.Client{Transport: bearerTransport{tok}}
	c := mcp.NewClient(&mcp.Implementation{Name: "termgate-test", Version: "1"}, nil)
	s, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: m[1], HTTPClient: hc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	text, isErr, _ := callText(t, s, "exec", map[string]any{"argv": []string{"/bin/sh", "-c", "echo over http"}})
	if isErr || !strings.HasPrefix(text, "over http\n") {
		t.Fatalf("exec over HTTP: %v %q", isErr, text)
	}
}

type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// TestMCPWithTheTypeScriptSDK: the TypeScript SDK's client (from
// web/node_modules) starts termgate mcp as a child over stdio, lists the
// tools, runs a command, reads a running one's output, cancels it and
// gets a tool error with the gateway's code.
func TestMCPWithTheTypeScriptSDK(t *testing.T) {
	runCLIFromEnv()
	t.Parallel()
	_, err := exec.LookPath("node")
	sandboxtest.Need(t, "node", err)
	sdk, _ := filepath.Abs(filepath.Join("..", "..", "web", "node_modules", "@modelcontextprotocol", "sdk"))
	_, err = os.Stat(filepath.Join(sdk, "package.json"))
	sandboxtest.Need(t, "the TypeScript MCP SDK (cd web && npm ci)", err)
	g := startGateway(t)
	tok := g.token(t, "acme", allScopes)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	args, _ := json.Marshal([]string{"mcp", "--url", g.url, "--token", tok})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join("testdata", "mcp-client.mjs"), sdk, self, "-test.run=^TestMCPWithTheTypeScriptSDK$")
	cmd.Env = append(os.Environ(), cliInTerminalEnv+"="+string(args))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v: %s %s", err, out, stderr.String())
	}
	var seen struct {
		Tools   []string
		Exec    string
		Running bool
		First   string
		End     struct {
			Code   int
			Reason string
		}
		Error struct {
			IsError bool
			Text    string
		}
	}
	if err := json.Unmarshal(out, &seen); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(seen.Tools) != 9 || seen.Tools[1] != "exec" {
		t.Errorf("tools: %q", seen.Tools)
	}
	if seen.Exec != "from typescript\n[exit code 2 (exited)]\n" {
		t.Errorf("exec: %q", seen.Exec)
	}
	if !seen.Running || seen.First != "started\n" || seen.End.Reason != "cancelled" {
		t.Errorf("a running command, cancelled: %+v", seen)
	}
	if !seen.Error.IsError || !strings.HasPrefix(seen.Error.Text, "not_found: ") {
		t.Errorf("a tool error: %+v", seen.Error)
	}
}
