package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/termgate/termgate/gateway/client/mcpserver"
)

// mcpOptions are the flags of termgate mcp.
type mcpOptions struct {
	clientFlags
	listen string
}

func mcpFlags(o *mcpOptions) *flag.FlagSet {
	fs := newClientFlagSet("mcp", &o.clientFlags)
	fs.StringVar(&o.listen, "listen", "", "serve MCP over streamable HTTP at http://`ADDR`/mcp instead of stdio; each client then sends its own gateway token (Authorization: Bearer), and --token is not used")
	return fs
}

// runMCP serves the gateway's agent tools over MCP: over stdin and stdout
// until the client leaves, or over HTTP until ctx ends.
func runMCP(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	var o mcpOptions
	fs := mcpFlags(&o)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case fs.NArg() != 0:
		return usageError{fmt.Errorf("mcp: unexpected argument %q", fs.Arg(0))}
	case o.url == "":
		return usageError{errors.New("mcp: --url (or TERMGATE_URL) is required")}
	case o.listen == "" && o.token == "":
		return usageError{errors.New("mcp: --token (or TERMGATE_TOKEN) is required over stdio")}
	}
	s, err := mcpserver.New(mcpserver.Config{URL: o.url, Token: o.token, Version: moduleVersion()})
	if err != nil {
		return usageError{err}
	}
	if o.listen == "" {
		return s.Run(ctx, io.NopCloser(stdin), nopWriteCloser{stdout})
	}
	return serveMCP(ctx, o.listen, s.Handler(), stderr)
}

// serveMCP serves h at /mcp on addr until ctx ends.
func serveMCP(ctx context.Context, addr string, h http.Handler, stderr io.Writer) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return usageError{fmt.Errorf("mcp: --listen: %w", err)}
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stderr, "termgate mcp: serving MCP at http://%s/mcp\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(shut)
	<-errc
	return nil
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// moduleVersion is the module version of the binary, "devel" when
// unknown.
func moduleVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" {
		return info.Main.Version
	}
	return "devel"
}
