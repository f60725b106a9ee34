package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/termgate/termgate/gateway/auth"
	"github.com/termgate/termgate/gateway/client"
	"github.com/termgate/termgate/gateway/wire"
)

// detachKeys is the sequence that leaves an interactive attach: Ctrl-],
// then "d", as documented in README.md.
var detachKeys = []byte{0x1d, 'd'}

// clientFlags are the flags every client command shares.
type clientFlags struct {
	url, token string
}

func newClientFlagSet(name string, stderr io.Writer, cf *clientFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("termgate "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	envString(fs, &cf.url, "url", "TERMGATE_URL", "gateway base URL, http(s)://host:port")
	envString(fs, &cf.token, "token", "TERMGATE_TOKEN", "bearer token")
	return fs
}

func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return errHelp
		}
		return usageError{err}
	}
	return nil
}

func (cf clientFlags) dial(ctx context.Context) (*client.Client, error) {
	if cf.url == "" || cf.token == "" {
		return nil, usageError{errors.New("--url and --token (or TERMGATE_URL and TERMGATE_TOKEN) are required")}
	}
	tok := cf.token
	return client.Dial(ctx, client.Config{URL: cf.url, Token: func(context.Context) (string, error) { return tok, nil }})
}

// runToken mints an HS256 token for development and tests.
func runToken(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("termgate token", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var secret string
	envString(fs, &secret, "secret-file", "TERMGATE_JWT_SECRET_FILE", "HS256 secret file")
	tenant := fs.String("tenant", "", "tenant the token grants")
	subject := fs.String("subject", "", "subject (default: the tenant)")
	scope := fs.String("scope", "exec:create exec:attach exec:write", "space-separated scopes")
	ttl := fs.Duration("ttl", time.Hour, "lifetime, at most 24h")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if secret == "" || *tenant == "" {
		return usageError{errors.New("token: --secret-file and --tenant are required")}
	}
	if *subject == "" {
		*subject = *tenant
	}
	a, err := auth.New(auth.Config{HS256SecretFile: secret})
	if err != nil {
		return err
	}
	scopes := map[string]bool{}
	for _, s := range strings.Fields(*scope) {
		scopes[s] = true
	}
	now := time.Now()
	tok, err := a.Mint(auth.Claims{Subject: *subject, Tenant: *tenant, Scopes: scopes, IssuedAt: now, ExpiresAt: now.Add(*ttl)})
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, tok)
	return nil
}

// runRun starts (or reattaches to, by id) an execution and streams it.
func runRun(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	var cf clientFlags
	fs := newClientFlagSet("run", stderr, &cf)
	id := fs.String("id", "", "execution ID (an idempotency key: rerunning reattaches)")
	usePTY := fs.Bool("pty", false, "run on a terminal (default when stdin is one)")
	noPTY := fs.Bool("no-pty", false, "use pipes even when stdin is a terminal")
	cwd := fs.String("cwd", "", "working directory inside the sandbox")
	timeout := fs.Duration("timeout", 0, "execution timeout (server default when 0)")
	env := map[string]string{}
	fs.Func("env", "K=V for the command (repeatable)", func(s string) error {
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" {
			return fmt.Errorf("want K=V, got %q", s)
		}
		env[k] = v
		return nil
	})
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return usageError{errors.New("run: no command: termgate run [flags] -- CMD [ARGS...]")}
	}
	in, _ := stdin.(*os.File)
	tty := *usePTY || (!*noPTY && in != nil && isTerminal(in))
	req := wire.Request{ID: *id, Command: fs.Arg(0), Args: fs.Args()[1:], Env: env, Cwd: *cwd, TimeoutMS: timeout.Milliseconds()}
	if tty {
		req.PTY = terminalSize(in)
	}
	c, err := cf.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	e, err := c.Start(ctx, req)
	if err != nil {
		return err
	}
	return stream(ctx, e, stdin, in, tty, stdout, stderr, false)
}

// runAttach follows an execution interactively.
func runAttach(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	var cf clientFlags
	fs := newClientFlagSet("attach", stderr, &cf)
	id := fs.String("id", "", "execution ID")
	after := fs.Uint64("after", 0, "resume after this sequence number (0: all retained output)")
	readOnly := fs.Bool("read-only", false, "watch without typing")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *id == "" {
		return usageError{errors.New("attach: --id is required")}
	}
	c, err := cf.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	e, err := c.Attach(ctx, *id, *after, *readOnly)
	if err != nil {
		return err
	}
	in, _ := stdin.(*os.File)
	tty := e.PTY() && in != nil && isTerminal(in)
	if tty && !*readOnly {
		if size := terminalSize(in); size != nil {
			e.Resize(ctx, size.Rows, size.Cols)
		}
	}
	return stream(ctx, e, stdin, in, tty, stdout, stderr, *readOnly)
}

// stream copies an execution's output to the local streams and local
// input to it, and returns its exit status as an exitError.
func stream(ctx context.Context, e *client.Execution, stdin io.Reader, in *os.File, tty bool, stdout, stderr io.Writer, readOnly bool) error {
	restore := func() {}
	if tty {
		if r, err := makeRaw(in); err == nil {
			restore = r
		}
		defer restore()
		stop := followLocalSize(ctx, e, in)
		defer stop()
	}
	detached := make(chan struct{})
	if !readOnly {
		go forwardInput(ctx, e, stdin, tty, detached)
	}
	for {
		ev, err := e.Next(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			select {
			case <-detached:
				restore()
				fmt.Fprintf(stderr, "\r\ntermgate: detached from %s; it keeps running\r\n", e.ID())
				return nil
			default:
			}
			return err
		}
		if done, err := show(ev, stdout, stderr, tty); done {
			restore()
			return err
		}
	}
}

// show writes one event; done reports the end, with the status to exit with.
func show(ev client.Event, stdout, stderr io.Writer, tty bool) (bool, error) {
	switch ev.Kind {
	case "output":
		if ev.Stream == 3 {
			stderr.Write(ev.Data)
		} else {
			stdout.Write(ev.Data)
		}
	case "gap":
		fmt.Fprintf(stderr, "\r\ntermgate: %d bytes of output were lost while disconnected\r\n", ev.Gap.Bytes)
	case "error":
		fmt.Fprintf(stderr, "\r\ntermgate: %s\r\n", ev.Err.Message)
	case "exit":
		if ev.Exit.Reason != "exited" {
			fmt.Fprintf(stderr, "termgate: %s\n", ev.Exit.Reason)
		}
		if st := ev.Exit.Status(); st != 0 {
			return true, exitError{st}
		}
		return true, nil
	}
	return false, nil
}

// forwardInput sends local input; with a terminal, the detach keys end
// the attach and leave the execution running.
func forwardInput(ctx context.Context, e *client.Execution, stdin io.Reader, tty bool, detached chan struct{}) {
	buf := make([]byte, 32<<10)
	var prev byte
	for {
		n, err := stdin.Read(buf)
		if n > 0 {
			data := buf[:n]
			if tty {
				if i := detachIndex(prev, data); i >= 0 {
					if i > 0 {
						e.Write(data[:i])
					}
					close(detached)
					e.Detach(ctx)
					return
				}
				prev = data[n-1]
			}
			e.Write(data)
		}
		if err != nil {
			if !tty {
				e.CloseStdin(ctx)
			}
			return
		}
	}
}

// detachIndex finds the detach keys in data, whose previous byte was prev,
// and returns where the input before them ends, or -1.
func detachIndex(prev byte, data []byte) int {
	if prev == detachKeys[0] && len(data) > 0 && data[0] == detachKeys[1] {
		return 0
	}
	for i := 0; i+1 < len(data); i++ {
		if data[i] == detachKeys[0] && data[i+1] == detachKeys[1] {
			return i
		}
	}
	return -1
}

// runCancel cancels an execution.
func runCancel(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cf clientFlags
	fs := newClientFlagSet("cancel", stderr, &cf)
	id := fs.String("id", "", "execution ID")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *id == "" {
		return usageError{errors.New("cancel: --id is required")}
	}
	c, err := cf.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Cancel(ctx, *id)
}
