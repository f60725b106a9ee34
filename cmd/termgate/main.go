// Command termgate runs commands in bubblewrap sandboxes and serves them to
// browser terminals and tools over WebSocket, is the command-line client of
// such a gateway, and prints the configurations that deploy it.
//
// Server side (Linux only):
//
//	termgate serve [flags]                 run the gateway (--dev: local development)
//	termgate exec [flags] -- CMD [ARGS...]  run one command in the sandbox, here
//	termgate verify [--json]                report what this host can enforce
//	termgate workspaces --workspace-root DIR [--json]  list tenant workspaces and quotas
//
// Client side (Linux, macOS, Windows; --url and --token, by default from
// TERMGATE_URL and TERMGATE_TOKEN):
//
//	termgate run [flags] -- CMD [ARGS...]   run a command through a gateway
//	termgate attach [--id ID]               attach to an execution (detach: Ctrl-] d)
//	termgate ls                             list the tenant's executions
//	termgate logs --id ID [--after N] [--follow]  print an execution's output
//	termgate cancel --id ID                 cancel an execution
//	termgate token --secret-file F --tenant T  mint a development token
//
// Either side:
//
//	termgate manifest systemd|nginx|caddy|kubernetes|haproxy [flags]
//	                                        print a deployment's configuration for serve
//	                                        (systemd and kubernetes check serve's flags: on Linux only)
//	termgate completion bash|zsh|fish       print a shell completion script
//	termgate version                        print the version and commit
//	termgate help [COMMAND [KIND]]          the overview, or a command's flags and examples
//
// Two first arguments are no commands for people, and neither help nor
// completion lists them: __keeper makes termgate the keeper of a state
// directory (serve starts it), and __cli-doc writes docs/cli.md (go
// generate runs it).
//
// commands.go lists the commands once: dispatch, --help, the completion
// scripts (completion.go) and docs/cli.md (clidoc.go) all read that list
// and each command's flag set.
//
// main parses flags into each package's Config and wires the concrete
// parts together: serve builds a sandbox.Launcher, a session.Supervisor, an
// auth.Authenticator and a gateway.Server; the client commands use
// gateway/client and the HTTP API; manifest checks serve's flags as serve
// would and prints them into a systemd unit or Kubernetes manifests.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

// exitError carries a process exit status through run.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// usageError marks bad command-line input: exit status 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), endSignals(os.Args[1:])...)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	os.Exit(exitCode(err, os.Stderr))
}

// endSignals are the signals that end the command given by args: SIGTERM,
// SIGINT and SIGHUP (its terminal went away), but SIGHUP neither for serve,
// which reloads its keys on it, nor for the keeper, which ignores it. Both
// handle it with signal.Notify, never signal.Ignore: an ignored signal is
// inherited by the sandboxed programs.
func endSignals(args []string) []os.Signal {
	if len(args) > 0 && (args[0] == "serve" || args[0] == keeperArg) {
		return []os.Signal{syscall.SIGTERM, os.Interrupt}
	}
	return []os.Signal{syscall.SIGTERM, syscall.SIGHUP, os.Interrupt}
}

func exitCode(err error, stderr io.Writer) int {
	var ee exitError
	var ue usageError
	var ge gatewayError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	case errors.As(err, &ge):
		fmt.Fprintf(stderr, "termgate: %v\n", err)
		return exitGateway
	case errors.Is(err, errHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "termgate: %v\n", err)
		return 2
	}
	fmt.Fprintf(stderr, "termgate: %v\n", err)
	return 1
}

var errHelp = errors.New("help requested")

// run is main without the process: testable with any streams.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		printUsage(stderr)
		return usageError{errors.New("no command given")}
	}
	return dispatch(ctx, args, stdin, stdout, stderr)
}

func newLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(c1Escaper{w}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}
