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

// exitOutputLost is the status of run and attach when output was lost
// and the command exited 0: EX_IOERR of sysexits.h.
const exitOutputLost = 74

// Bounds of --reconnect, the reconnect budget of run and attach.
const (
	minReconnect     = time.Second
	maxReconnect     = 24 * time.Hour
	defaultReconnect = client.DefaultReconnectBudget
)

// clientFlags are the flags every client command shares.
type clientFlags struct {
	url, token string
	// reconnect is how long run and attach keep reconnecting to a gateway
	// that went away (--reconnect); zero elsewhere: the client's default.
	reconnect time.Duration
	// exec, when set, makes files paths relative to the directory that
	// execution started in (cp and ls of ID:PATH).
	exec string
}

// reconnectFlag registers --reconnect on fs.
func (cf *clientFlags) reconnectFlag(fs *flag.FlagSet) {
	fs.DurationVar(&cf.reconnect, "reconnect", defaultReconnect,
		"keep reconnecting to a gateway that went away, or asking again for an execution whose node is unavailable, this long, then exit 255 (1s to 24h)")
}

// checkReconnect refuses a --reconnect outside its bounds.
func (cf clientFlags) checkReconnect() error {
	if cf.reconnect < minReconnect || cf.reconnect > maxReconnect {
		return usageError{fmt.Errorf("--reconnect %v: want a duration from %v to %v", cf.reconnect, minReconnect, maxReconnect)}
	}
	return nil
}

// newClientFlagSet returns the flag set of client command name with
// --url and --token bound to cf.
func newClientFlagSet(name string, cf *clientFlags) *flag.FlagSet {
	fs := newFlagSet(name)
	envString(fs, &cf.url, "url", "TERMGATE_URL", "gateway base `URL`, http(s)://host:port")
	envString(fs, &cf.token, "token", "TERMGATE_TOKEN", "bearer `TOKEN`")
	return fs
}

func (cf clientFlags) dial(ctx context.Context) (*client.Client, error) {
	if cf.url == "" || cf.token == "" {
		return nil, usageError{errors.New("--url and --token (or TERMGATE_URL and TERMGATE_TOKEN) are required")}
	}
	tok := cf.token
	c, err := client.Dial(ctx, client.Config{URL: cf.url, Token: func(context.Context) (string, error) { return tok, nil }, ReconnectBudget: cf.reconnect})
	var se *client.Error
	if err != nil && !errors.As(err, &se) && ctx.Err() == nil {
		return nil, gatewayError{fmt.Sprintf("cannot reach the gateway at %s: %v", cf.url, err)}
	}
	return c, err
}

// tokenOptions are the flags of termgate token.
type tokenOptions struct {
	secretFile, tenant, subject, scope string
	ttl                                time.Duration
}

func tokenFlags(o *tokenOptions) *flag.FlagSet {
	fs := newFlagSet("token")
	envString(fs, &o.secretFile, "secret-file", "TERMGATE_JWT_SECRET_FILE", "HS256 secret `FILE`")
	fs.StringVar(&o.tenant, "tenant", "", "tenant the token grants")
	fs.StringVar(&o.subject, "subject", "", "subject (default: the tenant)")
	fs.StringVar(&o.scope, "scope", "exec:create exec:attach exec:write", "space-separated scopes")
	fs.DurationVar(&o.ttl, "ttl", time.Hour, "lifetime, at most 24h")
	return fs
}

// runToken mints an HS256 token for development and tests.
func runToken(args []string, stdout, stderr io.Writer) error {
	var o tokenOptions
	if err := parseFlags(tokenFlags(&o), args); err != nil {
		return err
	}
	if o.secretFile == "" || o.tenant == "" {
		return usageError{errors.New("token: --secret-file and --tenant are required")}
	}
	if o.subject == "" {
		o.subject = o.tenant
	}
	a, err := auth.New(auth.Config{HS256SecretFile: o.secretFile})
	if err != nil {
		return err
	}
	scopes := map[string]bool{}
	for _, s := range strings.Fields(o.scope) {
		scopes[s] = true
	}
	now := time.Now()
	tok, err := a.Mint(auth.Claims{Subject: o.subject, Tenant: o.tenant, Scopes: scopes, IssuedAt: now, ExpiresAt: now.Add(o.ttl)})
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, tok)
	return nil
}

// runOptions are the flags of termgate run.
type runOptions struct {
	clientFlags
	id, cwd    string
	pty, noPTY bool
	allowLoss  bool
	timeout    time.Duration
	env        map[string]string
}

func runFlags(o *runOptions) *flag.FlagSet {
	fs := newClientFlagSet("run", &o.clientFlags)
	o.reconnectFlag(fs)
	fs.StringVar(&o.id, "id", "", "execution `ID` (an idempotency key: rerunning reattaches)")
	fs.BoolVar(&o.pty, "pty", false, "run on a terminal (default when stdin is one)")
	fs.BoolVar(&o.noPTY, "no-pty", false, "use pipes even when stdin is a terminal")
	fs.StringVar(&o.cwd, "cwd", "", "working directory inside the sandbox")
	fs.DurationVar(&o.timeout, "timeout", 0, "execution timeout (server default when 0)")
	fs.BoolVar(&o.allowLoss, "allow-loss", false, "exit with the command's status even when output was lost (else 74)")
	o.env = map[string]string{}
	fs.Func("env", "`K=V` for the command (repeatable)", func(s string) error {
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" {
			return fmt.Errorf("want K=V, got %q", s)
		}
		o.env[k] = v
		return nil
	})
	return fs
}

// runRun starts (or reattaches to, by id) an execution and streams it.
func runRun(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	var o runOptions
	fs := runFlags(&o)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return usageError{errors.New("run: no command: termgate run [flags] -- CMD [ARGS...]")}
	}
	if err := o.checkReconnect(); err != nil {
		return err
	}
	in, _ := stdin.(*os.File)
	tty := o.pty || (!o.noPTY && in != nil && isTerminal(in))
	req := wire.Request{ID: o.id, Command: fs.Arg(0), Args: fs.Args()[1:], Env: o.env, Cwd: o.cwd, TimeoutMS: o.timeout.Milliseconds()}
	if tty {
		req.PTY = terminalSize(in)
	}
	c, err := o.dial(ctx)
	if err != nil {
		return o.failure(err, o.id)
	}
	defer c.Close()
	var e *client.Execution
	start := func() (err error) { e, err = c.Start(ctx, req); return err }
	if o.id != "" {
		// A keyed start is asked again safely: it finds the first one.
		err = retryUnavailable(ctx, o.reconnect, stderr, start)
	} else {
		err = start() // a retry could run the command twice
	}
	if err != nil {
		return o.failure(err, o.id)
	}
	return o.failure(stream(ctx, e, stdin, in, tty, stdout, stderr, streamOptions{allowLoss: o.allowLoss}), e.ID())
}

// attachOptions are the flags of termgate attach.
type attachOptions struct {
	clientFlags
	id          string
	after       uint64
	incarnation string
	readOnly    bool
	allowLoss   bool
}

func attachFlags(o *attachOptions) *flag.FlagSet {
	fs := newClientFlagSet("attach", &o.clientFlags)
	o.reconnectFlag(fs)
	fs.StringVar(&o.id, "id", "", "execution `ID` (on a terminal, without it: pick one from a list)")
	fs.Uint64Var(&o.after, "after", 0, "resume after this sequence number (0: all retained output); needs --incarnation")
	fs.StringVar(&o.incarnation, "incarnation", "", "the execution's `incarnation` that --after counts in (the incarnation of GET /v1/executions/ID, or of the attach that saw that sequence): the ID may name a new execution since")
	fs.BoolVar(&o.readOnly, "read-only", false, "watch without typing")
	fs.BoolVar(&o.allowLoss, "allow-loss", false, "exit with the command's status even when output was lost (else 74)")
	return fs
}

// runAttach follows an execution interactively.
func runAttach(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	var o attachOptions
	if err := parseFlags(attachFlags(&o), args); err != nil {
		return err
	}
	if err := o.checkReconnect(); err != nil {
		return err
	}
	if o.after > 0 && o.incarnation == "" {
		return usageError{errors.New("attach: --after needs --incarnation: the ID may name a new execution since, whose first events --after would skip")}
	}
	id, err := o.attachID(ctx, stdin, stderr)
	if err != nil {
		return err
	}
	c, err := o.dial(ctx)
	if err != nil {
		return o.failure(err, id)
	}
	defer c.Close()
	return o.failure(o.follow(ctx, c, id, stdin, stdout, stderr), id)
}

// follow attaches to execution id and streams it.
func (o attachOptions) follow(ctx context.Context, c *client.Client, id string, stdin io.Reader, stdout, stderr io.Writer) error {
	// A terminal shows the screen: a snapshot redraws it where history was
	// evicted. Anything else keeps a transcript, and a gap says what it lacks.
	out, _ := stdout.(*os.File)
	var e *client.Execution
	err := retryUnavailable(ctx, o.reconnect, stderr, func() (err error) {
		e, err = c.AttachWith(ctx, id, client.AttachOptions{After: o.after, Incarnation: o.incarnation, ReadOnly: o.readOnly, Snapshot: out != nil && isTerminal(out)})
		return err
	})
	if err != nil {
		return err
	}
	in, _ := stdin.(*os.File)
	tty := e.PTY() && in != nil && isTerminal(in)
	if tty && !o.readOnly {
		if size := terminalSize(in); size != nil {
			// Not waited for: its answer comes after the replayed events,
			// which only stream takes, and more than the client buffers
			// would hold the answer back for ever. It ends when answered.
			go e.Resize(ctx, size.Rows, size.Cols)
		}
	}
	so := streamOptions{readOnly: o.readOnly, allowLoss: o.allowLoss, replay: newReplayFilter(o.after, e.HistoryEnd())}
	return stream(ctx, e, stdin, in, tty, stdout, stderr, so)
}

// retryUnavailable runs op until it succeeds or fails otherwise than
// unavailable (the node that owns the execution does not answer, for
// now: it may be restarting or cut off), for up to budget (--reconnect)
// in all, as the client waits out a gateway that went away. Between
// tries it waits what the server advised or a backoff, whichever is
// longer; it says once on stderr that it waits.
func retryUnavailable(ctx context.Context, budget time.Duration, stderr io.Writer, op func() error) error {
	began := time.Now()
	for attempt := 0; ; attempt++ {
		err := op()
		var se *client.Error
		if err == nil || !errors.As(err, &se) || se.Code != wire.CodeUnavailable {
			return err
		}
		left := budget - time.Since(began)
		if left <= 0 {
			return err
		}
		if attempt == 0 {
			fmt.Fprintf(stderr, "termgate: %s\ntermgate: trying again for up to %v (--reconnect)\n", se.Message, budget)
		}
		wait := min(max(se.RetryAfter(), unavailableBackoff<<min(attempt, 3)), left)
		if !sleepCtx(ctx, wait) {
			return err
		}
	}
}

// unavailableBackoff is the first wait after an unavailable answer that
// advised none; it doubles up to 8 times that.
const unavailableBackoff = 250 * time.Millisecond

// sleepCtx waits d, or less when ctx ends first (false).
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// streamOptions say how stream follows an execution.
type streamOptions struct {
	readOnly  bool // no input is sent
	allowLoss bool // lost output does not change the exit status
	// replay drops the local terminal's answers to replayed queries; nil
	// for a new execution, whose queries are live and want their answers.
	replay *replayFilter
}

// stream copies an execution's output to the local streams and local
// input to it, and returns its exit status as an exitError: 74 when the
// command exited 0 but output was lost, unless so.allowLoss.
func stream(ctx context.Context, e *client.Execution, stdin io.Reader, in *os.File, tty bool, stdout, stderr io.Writer, so streamOptions) error {
	restore := func() {}
	if tty {
		if r, err := makeRaw(in); err == nil {
			restore = r
		}
		defer restore()
		stop := followLocalSize(ctx, e, in)
		defer stop()
		stdin = so.replay.reader(stdin)
	}
	detached := make(chan struct{})
	if !so.readOnly {
		go forwardInput(ctx, e, stdin, tty, detached)
	}
	lost := false
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
		if ev.Gap != nil && ev.Kind != "snapshot" {
			lost = true // a snapshot redraws the screen the lost history drew
		}
		done, err := show(ev, stdout, stderr, tty)
		so.replay.shown(ev)
		if done {
			restore()
			if err == nil && lost && !so.allowLoss {
				fmt.Fprintf(stderr, "termgate: the command exited 0, but output was lost: exiting %d (--allow-loss keeps the command's status)\n", exitOutputLost)
				return exitError{exitOutputLost}
			}
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
		fmt.Fprintf(stderr, "\r\ntermgate: %s\r\n", lossMessage(*ev.Gap))
	case "snapshot":
		stdout.Write(ev.Data) // it resets the terminal first
	case "error":
		fmt.Fprintf(stderr, "\r\ntermgate: %s\r\n", ev.Err.Message)
	case "notice":
		// On a raw terminal the cursor may be anywhere in a line.
		if tty {
			fmt.Fprintf(stderr, "\r\ntermgate: %s\r\n", noticeText(*ev.Notice, "shell"))
		} else {
			fmt.Fprintf(stderr, "termgate: %s\n", noticeText(*ev.Notice, "command"))
		}
	case "exit":
		if ev.Exit.Reason == wire.ReasonLost {
			return true, gatewayError{"the execution was lost: the server's sandbox keeper ended, and the command with it; its exit status is unknown"}
		}
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

// noticeText says what a notice announces, with the time in local time:
// "this shell will be stopped at 14:05:09 (its timeout ends)".
func noticeText(n client.Notice, noun string) string {
	why := map[string]string{wire.NoticeTimeout: "its timeout ends", wire.NoticeIdleTimeout: "idle: no writer attached and no input"}[n.Reason]
	switch {
	case n.Reason == wire.NoticeIdleCancelled:
		return "no longer idle: this " + noun + " keeps running"
	case why != "" && !n.At.IsZero():
		return fmt.Sprintf("this %s will be stopped at %s (%s)", noun, n.At.Local().Format("15:04:05"), why)
	}
	return n.Message
}

// lossCauses say why output was lost, by a gap's cause.
var lossCauses = map[string]string{
	wire.LossHoldExpired: "the hold expired before a writer came back",
	wire.LossUnheld:      "they were evicted while no acknowledging writer was attached",
	wire.LossReadOnly:    "a read-only viewer does not hold output, and this one fell behind",
	wire.LossLive:        "the execution runs with flow live, which never waits for a slow reader",
	"":                   "the server no longer held them",
}

// lossMessage says how much output a gap lost, and why.
func lossMessage(g client.Gap) string {
	n := fmt.Sprintf("%d bytes", g.Bytes)
	if g.Inexact {
		n = "up to " + n
	}
	why, ok := lossCauses[g.Cause]
	if !ok {
		why = "cause " + g.Cause
	}
	return fmt.Sprintf("%s of output were lost: %s", n, why)
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

// cancelOptions are the flags of termgate cancel.
type cancelOptions struct {
	clientFlags
	id string
}

func cancelFlags(o *cancelOptions) *flag.FlagSet {
	fs := newClientFlagSet("cancel", &o.clientFlags)
	fs.StringVar(&o.id, "id", "", "execution `ID`")
	return fs
}

// runCancel cancels an execution.
func runCancel(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o cancelOptions
	if err := parseFlags(cancelFlags(&o), args); err != nil {
		return err
	}
	if o.id == "" {
		return usageError{errors.New("cancel: --id is required")}
	}
	c, err := o.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Cancel(ctx, o.id)
}
