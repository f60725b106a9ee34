// Package mcpserver serves a termgate gateway's agent exec, files and
// previews as MCP tools (the Model Context Protocol), so that an agent's
// commands run in the gateway's sandboxes with all of its guarantees.
// termgate mcp runs it over stdio, or over streamable HTTP.
//
// It holds no sandbox and no secret of its own: every tool call is an
// HTTP API request to the gateway with a bearer token (Config.Token, or
// over HTTP the one the MCP client sent), and the token's scopes bound
// what the tools can do. A tool that fails answers a tool error whose text
// starts with the gateway's error code ("not_found: ...").
//
// The tools' names and input and output schemas are part of termgate's
// interface (docs/mcp.md); a test keeps them as documented.
package mcpserver

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/termgate/termgate/gateway/wire"
)

// Config says which gateway the tools call, and as whom.
type Config struct {
	// URL is the gateway's base URL, http(s)://host:port (any node).
	URL string
	// Token is the bearer token of calls over stdio; over HTTP each MCP
	// client's own (its Authorization header) is used instead.
	Token string
	// HTTPClient makes the calls (nil: one of its own).
	HTTPClient *http.Client
	// Version is reported to MCP clients as the server's.
	Version string
}

// Server is the MCP server. It is safe for concurrent use.
type Server struct {
	cfg  Config
	mcp  *mcp.Server
	http *http.Client

	mu      sync.Mutex
	cursors map[string]uint64 // where each execution's answers left off, by token and ID
}

// maxCursors bounds Server.cursors; past it an arbitrary one goes (its
// next call reads where the gateway's own cursor says).
const maxCursors = 4096

// New returns a Server for cfg's gateway with every tool registered.
func New(cfg Config) (*Server, error) {
	if !strings.HasPrefix(cfg.URL, "http://") && !strings.HasPrefix(cfg.URL, "https://") {
		return nil, fmt.Errorf("mcpserver: gateway URL %q must start with http:// or https://", cfg.URL)
	}
	cfg.URL = strings.TrimRight(cfg.URL, "/")
	s := &Server{cfg: cfg, http: cfg.HTTPClient, cursors: map[string]uint64{}}
	if s.http == nil {
		s.http = &http.Client{Timeout: time.Duration(wire.MaxYieldMS)*time.Millisecond + time.Minute}
	}
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: "termgate", Title: "termgate sandboxes", Version: cfg.Version}, &mcp.ServerOptions{
		Instructions: "Run commands in termgate's Linux sandboxes. exec runs a command and returns its output and exit code, " +
			"or its id while it still runs: continue it with write_stdin (input) or read_output. Files live in the tenant's workspace, /workspace in every sandbox.",
	})
	s.addTools()
	return s, nil
}

// Run serves one MCP client over r and w (a process's stdin and stdout:
// newline-delimited JSON-RPC) until it leaves or ctx ends.
func (s *Server) Run(ctx context.Context, r io.ReadCloser, w io.WriteCloser) error {
	return s.mcp.Run(ctx, &mcp.IOTransport{Reader: r, Writer: w})
}

// Handler serves MCP clients over streamable HTTP. Each request must carry
// an Authorization: Bearer token, which the tool calls present to the
// gateway; one without is answered 401 before MCP sees it.
func (s *Server) Handler() http.Handler {
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.mcp }, nil)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if bearer(r.Header) == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="termgate"`)
			http.Error(w, "a bearer token for the gateway is required", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// token is the bearer token a tool call presents: its HTTP client's, else
// the configured one.
func (s *Server) token(req *mcp.CallToolRequest) string {
	if req != nil && req.Extra != nil && req.Extra.Header != nil {
		if t := bearer(req.Extra.Header); t != "" {
			return t
		}
	}
	return s.cfg.Token
}

func bearer(h http.Header) string {
	scheme, t, _ := strings.Cut(h.Get("Authorization"), " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(t)
}

// cursorKey keys a cursor by the token's hash (tokens of other tenants
// name other executions by the same ID) and the execution's ID.
func cursorKey(token, id string) string {
	h := sha256.Sum256([]byte(token))
	return string(h[:8]) + id
}

func (s *Server) cursor(token, id string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cursors[cursorKey(token, id)]
}

func (s *Server) keep(token string, r wire.ExecResult) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.cursors) >= maxCursors {
		for k := range s.cursors {
			delete(s.cursors, k)
			break
		}
	}
	s.cursors[cursorKey(token, r.ID)] = r.NextSeq
}

// Error is a gateway's refusal, as a tool error shows it.
type Error struct {
	Status  int
	Code    string // a wire.Code* constant
	Message string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// errNoToken is the answer to a call with no token to present.
var errNoToken = &Error{Status: http.StatusUnauthorized, Code: wire.CodeUnauthorized, Message: "no token: set TERMGATE_TOKEN, or send Authorization: Bearer"}

// retryable says whether a failed call may be sent again as it was: the
// gateway was not reached, or said that the node is unavailable.
func retryable(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		return e.Code == wire.CodeUnavailable
	}
	return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}
