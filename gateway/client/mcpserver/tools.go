package mcpserver

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/termgate/termgate/gateway/wire"
)

// maxFileText is the most of a file read_file returns.
const maxFileText = 1 << 20

// ExecInput is the exec tool's input.
type ExecInput struct {
	Command        string            `json:"command,omitempty" jsonschema:"a shell command, run by /bin/sh -c (or give argv)"`
	Argv           []string          `json:"argv,omitempty" jsonschema:"a program the gateway allows and its arguments, instead of command"`
	Cwd            string            `json:"cwd,omitempty" jsonschema:"working directory in the sandbox (default /workspace)"`
	Env            map[string]string `json:"env,omitempty" jsonschema:"environment variables"`
	TTY            bool              `json:"tty,omitempty" jsonschema:"run on a terminal (output stripped of escape sequences)"`
	Interactive    bool              `json:"interactive,omitempty" jsonschema:"keep standard input open for write_stdin (a terminal's always is)"`
	Stdin          string            `json:"stdin,omitempty" jsonschema:"input written first"`
	YieldMS        int64             `json:"yield_ms,omitempty" jsonschema:"longest wait for the exit in milliseconds (default 10000, at most 60000); the call returns at the exit when sooner"`
	MaxOutputBytes int               `json:"max_output_bytes,omitempty" jsonschema:"most bytes of output returned (default 65536, at most 1048576): past it the head and tail, with the bytes left out counted"`
	TimeoutMS      int64             `json:"timeout_ms,omitempty" jsonschema:"stop the command after this many milliseconds (default: the gateway's)"`
	ID             string            `json:"id,omitempty" jsonschema:"the execution's id (default: a new one)"`
}

// WriteInput is the write_stdin tool's input.
type WriteInput struct {
	ID             string `json:"id" jsonschema:"the execution's id, from exec"`
	Input          string `json:"input,omitempty" jsonschema:"text written to the command's input (a newline ends a line)"`
	CloseStdin     bool   `json:"close_stdin,omitempty" jsonschema:"close the input after it: the command reads end of file"`
	YieldMS        int64  `json:"yield_ms,omitempty" jsonschema:"longest wait for output in milliseconds (default 10000, at most 60000); the call returns at the exit when sooner"`
	MaxOutputBytes int    `json:"max_output_bytes,omitempty" jsonschema:"most bytes of output returned (default 65536)"`
}

// ReadInput is the read_output tool's input.
type ReadInput struct {
	ID             string `json:"id" jsonschema:"the execution's id"`
	Seq            uint64 `json:"seq,omitempty" jsonschema:"first event to read: a next_seq from an earlier answer (default: where the last answer left off)"`
	YieldMS        int64  `json:"yield_ms,omitempty" jsonschema:"wait this many milliseconds for the exit (default 0: return what is there)"`
	MaxOutputBytes int    `json:"max_output_bytes,omitempty" jsonschema:"most bytes of output returned (default 65536)"`
}

// IDInput names an execution.
type IDInput struct {
	ID string `json:"id" jsonschema:"the execution's id"`
}

// ListInput is list_executions' input: none.
type ListInput struct{}

// FileInput names a path in the workspace.
type FileInput struct {
	Path string `json:"path" jsonschema:"a path in the tenant's workspace (/workspace in a sandbox), or relative to execution id's working directory"`
	ID   string `json:"id,omitempty" jsonschema:"an execution: path is then relative to its working directory"`
}

// WriteFileInput is write_file's input.
type WriteFileInput struct {
	FileInput
	Content string `json:"content" jsonschema:"the file's new content, as text"`
	Mode    string `json:"mode,omitempty" jsonschema:"permission bits in octal, such as 0755 (default 0644)"`
}

// PreviewInput is preview_port's input.
type PreviewInput struct {
	ID         string `json:"id" jsonschema:"the execution whose program listens"`
	Port       int    `json:"port" jsonschema:"the TCP port it listens on inside the sandbox"`
	TTLSeconds int64  `json:"ttl_seconds,omitempty" jsonschema:"how long the URL works (default: the gateway's)"`
}

// Preview is preview_port's answer.
type Preview struct {
	URL       string `json:"url"`
	Name      string `json:"name"`
	ExpiresAt string `json:"expires_at"`
}

// Executions is list_executions' answer.
type Executions struct {
	Executions []Execution `json:"executions"`
}

// Execution is one execution as list_executions shows it.
type Execution struct {
	ID      string `json:"id"`
	Status  string `json:"status"`
	PTY     bool   `json:"pty"`
	Started string `json:"started"`
	Cwd     string `json:"cwd,omitempty"`
	Node    string `json:"node,omitempty"`
}

// FileText is read_file's answer.
type FileText struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
	// Text is the file's content, or its first 1 MiB; Base64 is set when
	// it is not UTF-8 text (and then holds the base64 of those bytes).
	Text      string `json:"text"`
	Base64    bool   `json:"base64,omitempty"`
	Truncated bool   `json:"truncated,omitempty"`
}

// Files is list_files' answer.
type Files struct {
	Entries []FileEntry `json:"entries"`
	More    bool        `json:"more,omitempty"`
}

// FileEntry is one name in a directory.
type FileEntry struct {
	Name   string `json:"name"`
	Type   string `json:"type"`
	Size   int64  `json:"size"`
	Mode   string `json:"mode"`
	MTime  string `json:"mtime"`
	Target string `json:"target,omitempty"`
}

// Written is write_file's answer.
type Written struct {
	Path  string `json:"path"`
	Bytes int    `json:"bytes"`
}

func (s *Server) addTools() {
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "exec", Description: "Run a command in a sandbox. Returns when it exits (output, exit code) or when yield_ms passes " +
		"(running, with its id: continue with write_stdin or read_output). Output past max_output_bytes is cut in the middle; the answer says how many bytes."}, s.exec)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "write_stdin", Description: "Write input to a running execution (a REPL, a prompt) and return the output that follows, as exec does."}, s.writeStdin)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "read_output", Description: "Return an execution's output after what earlier answers returned (or from seq), waiting up to yield_ms for its exit."}, s.readOutput)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "list_executions", Description: "List the tenant's executions, running and finished."}, s.list)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "cancel", Description: "Stop an execution: SIGTERM, then SIGKILL after a grace period."}, s.cancel)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "read_file", Description: "Read a file of the workspace (its first 1 MiB)."}, s.readFile)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "write_file", Description: "Write a file of the workspace, atomically: a program sees the old content or the new, never a part."}, s.writeFile)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "list_files", Description: "List a directory of the workspace."}, s.listFiles)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "preview_port", Description: "Return a URL that opens the web server a program of the execution listens with on port."}, s.preview)
}

func (s *Server) exec(ctx context.Context, req *mcp.CallToolRequest, in ExecInput) (*mcp.CallToolResult, wire.ExecResult, error) {
	tok := s.token(req)
	body := wire.ExecRequest{
		ID: in.ID, Command: in.Command, Argv: in.Argv, Cwd: in.Cwd, Env: in.Env, TTY: in.TTY, Interactive: in.Interactive,
		Stdin: in.Stdin, TimeoutMS: in.TimeoutMS, Wait: wire.Wait{MaxOutputBytes: in.MaxOutputBytes, Seq: 1},
	}
	if in.Command == "" && in.Argv == nil {
		return nil, wire.ExecResult{}, &Error{Status: http.StatusBadRequest, Code: wire.CodeBadRequest, Message: "exec needs command or argv"}
	}
	if body.ID == "" {
		body.ID = newID() // a retried start finds the execution its first try made
	}
	if in.YieldMS != 0 {
		body.YieldMS = &in.YieldMS
	}
	var res wire.ExecResult
	if err := s.call(ctx, tok, request{method: http.MethodPost, path: "/v1/exec", json: body}, &res); err != nil {
		return nil, res, err
	}
	s.keep(tok, res)
	return textResult(res), res, nil
}

func (s *Server) writeStdin(ctx context.Context, req *mcp.CallToolRequest, in WriteInput) (*mcp.CallToolResult, wire.ExecResult, error) {
	tok := s.token(req)
	var info struct {
		InputOffset uint64 `json:"input_offset"`
	}
	path := "/v1/executions/" + url.PathEscape(in.ID)
	if err := s.call(ctx, tok, request{method: http.MethodGet, path: path}, &info); err != nil {
		return nil, wire.ExecResult{}, err
	}
	// The offset makes the write safe to send again.
	body := wire.WriteRequest{Input: in.Input, Offset: &info.InputOffset, CloseStdin: in.CloseStdin,
		Wait: wire.Wait{MaxOutputBytes: in.MaxOutputBytes, Seq: s.cursor(tok, in.ID)}}
	if in.YieldMS != 0 {
		body.YieldMS = &in.YieldMS
	}
	var res wire.ExecResult
	if err := s.call(ctx, tok, request{method: http.MethodPost, path: path + "/write", json: body}, &res); err != nil {
		return nil, res, err
	}
	s.keep(tok, res)
	return textResult(res), res, nil
}

func (s *Server) readOutput(ctx context.Context, req *mcp.CallToolRequest, in ReadInput) (*mcp.CallToolResult, wire.ExecResult, error) {
	tok := s.token(req)
	seq := in.Seq
	if seq == 0 {
		seq = s.cursor(tok, in.ID)
	}
	body := wire.ExecRequest{ID: in.ID, Wait: wire.Wait{YieldMS: &in.YieldMS, MaxOutputBytes: in.MaxOutputBytes, Seq: seq}}
	var res wire.ExecResult
	if err := s.call(ctx, tok, request{method: http.MethodPost, path: "/v1/exec", json: body}, &res); err != nil {
		return nil, res, err
	}
	s.keep(tok, res)
	return textResult(res), res, nil
}

func (s *Server) list(ctx context.Context, req *mcp.CallToolRequest, _ ListInput) (*mcp.CallToolResult, Executions, error) {
	var out Executions
	if err := s.call(ctx, s.token(req), request{method: http.MethodGet, path: "/v1/executions"}, &out); err != nil {
		return nil, out, err
	}
	var b strings.Builder
	if len(out.Executions) == 0 {
		b.WriteString("no executions\n")
	}
	for _, e := range out.Executions {
		fmt.Fprintf(&b, "%s\t%s\tstarted %s", e.ID, e.Status, e.Started)
		if e.Cwd != "" {
			fmt.Fprintf(&b, "\tin %s", e.Cwd)
		}
		b.WriteByte('\n')
	}
	return text(b.String()), out, nil
}

func (s *Server) cancel(ctx context.Context, req *mcp.CallToolRequest, in IDInput) (*mcp.CallToolResult, Execution, error) {
	var out Execution
	err := s.call(ctx, s.token(req), request{method: http.MethodPost, path: "/v1/executions/" + url.PathEscape(in.ID) + "/cancel"}, &out)
	if err != nil {
		return nil, out, err
	}
	return text(fmt.Sprintf("%s is being cancelled (status %s)\n", out.ID, out.Status)), out, nil
}

// filesPath is in's path under the files API.
func filesPath(in FileInput) string {
	p := strings.TrimLeft(in.Path, "/")
	if in.ID != "" {
		return "/v1/executions/" + url.PathEscape(in.ID) + "/files/" + escapePath(p)
	}
	return "/v1/files/" + escapePath(p)
}

func (s *Server) readFile(ctx context.Context, req *mcp.CallToolRequest, in FileInput) (*mcp.CallToolResult, FileText, error) {
	var b []byte
	h := http.Header{"Range": {"bytes=0-" + strconv.Itoa(maxFileText-1)}}
	out := FileText{Path: in.Path}
	if strings.HasSuffix(in.Path, "/") {
		return nil, out, &Error{Status: http.StatusBadRequest, Code: wire.CodeBadRequest, Message: "read_file reads a file: use list_files for a directory"}
	}
	if err := s.call(ctx, s.token(req), request{method: http.MethodGet, path: filesPath(in), header: h}, &b); err != nil {
		return nil, out, err
	}
	out.Size, out.Text = int64(len(b)), string(b)
	out.Truncated = len(b) == maxFileText
	if !utf8.Valid(b) {
		out.Text, out.Base64 = base64.StdEncoding.EncodeToString(b), true
		return text(fmt.Sprintf("%s is not UTF-8 text: %d bytes as base64:\n%s\n", in.Path, len(b), out.Text)), out, nil
	}
	return text(out.Text), out, nil
}

func (s *Server) writeFile(ctx context.Context, req *mcp.CallToolRequest, in WriteFileInput) (*mcp.CallToolResult, Written, error) {
	p := filesPath(in.FileInput)
	if in.Mode != "" {
		p += "?mode=" + url.QueryEscape(in.Mode)
	}
	out := Written{Path: in.Path, Bytes: len(in.Content)}
	if err := s.call(ctx, s.token(req), request{method: http.MethodPut, path: p, body: strings.NewReader(in.Content)}, nil); err != nil {
		return nil, out, err
	}
	return text(fmt.Sprintf("wrote %d bytes to %s\n", out.Bytes, in.Path)), out, nil
}

func (s *Server) listFiles(ctx context.Context, req *mcp.CallToolRequest, in FileInput) (*mcp.CallToolResult, Files, error) {
	if !strings.HasSuffix(in.Path, "/") {
		in.Path += "/"
	}
	var page struct {
		Entries []FileEntry `json:"entries"`
		Next    string      `json:"next"`
	}
	var out Files
	if err := s.call(ctx, s.token(req), request{method: http.MethodGet, path: filesPath(in)}, &page); err != nil {
		return nil, out, err
	}
	out.Entries, out.More = page.Entries, page.Next != ""
	var b strings.Builder
	for _, e := range out.Entries {
		fmt.Fprintf(&b, "%s\t%s\t%d\t%s", e.Type, e.Mode, e.Size, e.Name)
		if e.Target != "" {
			fmt.Fprintf(&b, " -> %s", e.Target)
		}
		b.WriteByte('\n')
	}
	if out.More {
		b.WriteString("(more entries follow: list a smaller directory)\n")
	}
	return text(b.String()), out, nil
}

func (s *Server) preview(ctx context.Context, req *mcp.CallToolRequest, in PreviewInput) (*mcp.CallToolResult, Preview, error) {
	var out Preview
	path := "/v1/executions/" + url.PathEscape(in.ID) + "/ports/" + strconv.Itoa(in.Port) + "/preview"
	body := map[string]int64{}
	if in.TTLSeconds != 0 {
		body["ttl_seconds"] = in.TTLSeconds
	}
	if err := s.call(ctx, s.token(req), request{method: http.MethodPost, path: path, json: body}, &out); err != nil {
		return nil, out, err
	}
	return text(fmt.Sprintf("%s (until %s)\n", out.URL, out.ExpiresAt)), out, nil
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

// textResult is an agent exec answer as a model reads it: the output,
// a line where bytes were left out, then how it ended or how to go on.
func textResult(r wire.ExecResult) *mcp.CallToolResult {
	var b strings.Builder
	out := r.Output
	if r.OmittedBytes > 0 {
		b.WriteString(out[:r.OmittedAt])
		if r.OmittedAt > 0 && !strings.HasSuffix(out[:r.OmittedAt], "\n") {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "[... %d bytes left out ...]\n", r.OmittedBytes)
		out = out[r.OmittedAt:]
	}
	b.WriteString(out)
	if out != "" && !strings.HasSuffix(out, "\n") {
		b.WriteByte('\n')
	}
	if r.LostBytes > 0 {
		fmt.Fprintf(&b, "[%d bytes of output were lost before this call read them]\n", r.LostBytes)
	}
	if r.ReplacedBytes > 0 {
		fmt.Fprintf(&b, "[%d bytes were not UTF-8 and show as U+FFFD]\n", r.ReplacedBytes)
	}
	switch x := r.Exit; {
	case x == nil:
		fmt.Fprintf(&b, "[still running as %s: write_stdin to give it input, read_output for more output, cancel to stop it]\n", r.ID)
	case x.Signal != "":
		fmt.Fprintf(&b, "[ended by %s (%s)]\n", x.Signal, x.Reason)
	default:
		fmt.Fprintf(&b, "[exit code %d (%s)]\n", x.Code, x.Reason)
	}
	return text(b.String())
}

// newID is a new execution ID.
func newID() string {
	var b [10]byte
	rand.Read(b[:])
	return "mcp-" + hex.EncodeToString(b[:])
}
