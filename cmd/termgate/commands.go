package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// command is one termgate subcommand: what help says about it, how to run
// it, and its flag set. Help, dispatch and shell completion all read the
// same list, so none of them can forget a command or a flag.
type command struct {
	name     string
	args     string // after the name in the usage line
	summary  string
	examples []string
	// exits, when set, is the command's table of exit statuses for help.
	exits string
	linux bool // serve, exec, verify and workspaces need Linux
	run   func(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error
	// flags returns a fresh flag set bound to throwaway options: the
	// same set run parses, for help and completion.
	flags func() *flag.FlagSet
	// values says what shell completion offers for a flag's value, by
	// flag name; other flags take any value.
	values map[string]completes
	// operands, when set, lists the words completion offers after the
	// flags (otherwise files: a command and its arguments).
	operands func() []string
	// kinds, when set, are the command's kinds as their help and
	// docs/cli.md show them, by the word after the command (manifest's):
	// help asked of a kind comes with a flag set named "termgate NAME KIND".
	kinds func() map[string]command
}

// completes is what a flag's value completes to: one of a few words, a
// file or a directory.
type completes struct {
	words []string
	file  bool
	dir   bool
}

// oneOf completes a flag's value to one of words, the values it accepts.
func oneOf(words ...string) completes { return completes{words: words} }

var (
	aFile = completes{file: true}
	aDir  = completes{dir: true}
)

// commands lists termgate's commands in the order help shows them. A
// function, not a variable: help and completion are commands themselves.
func commands() []command {
	return []command{
		{
			name: "serve", args: "[flags]", linux: true,
			summary: "run the WebSocket gateway (--dev: local development)",
			examples: []string{
				"termgate serve --dev",
				"termgate serve --listen 0.0.0.0:8443 --tls-cert cert.pem --tls-key key.pem \\\n      --jwt-secret-file /etc/termgate/secret --workspace-root /var/lib/termgate/workspaces",
				"TERMGATE_MEMORY=2G termgate serve --dev --max-running-per-tenant 4",
				"termgate serve --print-config > /etc/termgate/serve.toml   # edit, then: termgate serve --config /etc/termgate/serve.toml",
			},
			run: func(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
				return runServe(ctx, args, stdout, stderr)
			},
			flags: serveFlagSet,
			values: map[string]completes{
				"network": oneOf("none", "host"), "proc": oneOf("auto", "none", "private"),
				"log-level": oneOf("debug", "info", "warn", "error"), "log-format": oneOf("json", "text"),
				"tls-cert": aFile, "tls-key": aFile, "jwt-secret-file": aFile, "jwt-public-key": aFile,
				"workspace-root": aDir,
			},
		},
		{
			name: "exec", args: "[flags] -- CMD [ARGS...]", linux: true,
			summary: "run one command in the sandbox, on this host, with this terminal attached (a PTY when stdin is one, or with --pty); exits with its status",
			exits:   execExits,
			examples: []string{
				"termgate exec -- /bin/sh -c 'id; ls /'",
				"termgate exec --workspace . --network host -- make test",
				"termgate exec --memory 256M --pids 64 --timeout 30s -- python3 job.py",
			},
			run: runExec, flags: execFlagSet,
			// --proc self-exe=PATH is typed: bash splits words at '='.
			values: map[string]completes{
				"network": oneOf("none", "host"), "proc": oneOf("none", "private"),
				"workspace": aDir, "ro": aFile, "rw": aFile,
			},
		},
		{
			name: "verify", args: "[--json]", linux: true,
			summary:  "report what this host can enforce; exits non-zero when it cannot isolate",
			examples: []string{"termgate verify", "termgate verify --json"},
			run: func(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
				return runVerify(ctx, args, stdout, stderr)
			},
			flags: verifyFlagSet,
		},
		{
			name: "workspaces", args: "--workspace-root DIR [--json]", linux: true,
			summary: "list tenant workspaces: uid, usage, quota",
			examples: []string{
				"termgate workspaces --workspace-root /var/lib/termgate/workspaces",
				"TERMGATE_WORKSPACE_ROOT=/var/lib/termgate/workspaces termgate workspaces --json",
			},
			run: func(_ context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
				return runWorkspaces(args, stdout, stderr)
			},
			flags:  workspacesFlagSet,
			values: map[string]completes{"workspace-root": aDir},
		},
		{
			name: "run", args: "[flags] -- CMD [ARGS...]",
			summary: "run a command through a gateway; exits with its status",
			examples: []string{
				"termgate run -- /bin/sh -c 'make test'",
				"termgate run --id build-7 --pty -- bash      # rerunning with the same id reattaches",
				"termgate run --env CI=1 --timeout 10m -- go test ./...",
			},
			exits: clientExits,
			run:   runRun,
			flags: func() *flag.FlagSet { return runFlags(new(runOptions)) },
		},
		{
			name: "attach", args: "[--id ID] [flags]",
			summary: "attach to an execution (detach: Ctrl-] d)",
			examples: []string{
				"termgate attach --id build-7",
				"termgate attach --id build-7 --read-only",
				"termgate attach --id build-7 --after 120 --incarnation INC   # only what came after event 120 of that execution",
			},
			exits: clientExits,
			run:   runAttach,
			flags: func() *flag.FlagSet { return attachFlags(new(attachOptions)) },
		},
		{
			name: "ls", args: "[flags] [:PATH]",
			summary:  "list the tenant's executions, or a directory of its workspace",
			examples: []string{"termgate ls", "termgate ls --url https://gateway.example.com --token \"$(cat token)\"", "termgate ls :src/"},
			run: func(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
				return runLs(ctx, args, stdout, stderr)
			},
			flags: func() *flag.FlagSet { return newClientFlagSet("ls", new(clientFlags)) },
		},
		{
			name: "forward", args: "[flags] ID [LOCAL:]REMOTE...",
			summary: "forward local ports to ports programs listen on in an execution's sandbox",
			examples: []string{
				"termgate forward build-7 5678                 # dlv --headless --listen 127.0.0.1:5678 inside",
				"termgate forward build-7 8080:8000 9229       # several at once",
				"termgate forward --address 0.0.0.0 build-7 0:3000   # a free local port, on every address",
			},
			exits: clientExits,
			run:   runForward,
			flags: func() *flag.FlagSet { return forwardFlags(new(forwardOptions)) },
		},
		{
			name: "preview", args: "[flags] ID PORT",
			summary: "print a URL that opens a port's web server (previews expire, and can be revoked)",
			examples: []string{
				"termgate preview build-7 5173                 # a dev server; its WebSockets too",
				"termgate preview --ttl 15m build-7 8888",
				"termgate preview --revoke build-7 5173",
			},
			run:   runPreview,
			flags: func() *flag.FlagSet { return previewFlags(new(previewOptions)) },
		},
		{
			name: "cp", args: "[flags] SRC DST",
			summary: "copy a file between this machine and the tenant's workspace (:PATH, or ID:PATH beside an execution)",
			examples: []string{
				"termgate cp report.csv :data/            # into /workspace/data/ of every sandbox of the tenant",
				"termgate cp :build/app.tar.gz .",
				"termgate cp -r ./repo :src/            # a tree, as a tar stream",
				"termgate cp build-7:out/report.txt .   # beside an execution: relative to where it started",
			},
			run:   runCp,
			flags: func() *flag.FlagSet { return cpFlags(new(clientFlags), new(bool)) },
		},
		{
			name: "mcp", args: "[flags]",
			summary: "serve the gateway's sandboxes to agents as MCP tools (exec, write_stdin, read_output, files, previews), over stdio or HTTP",
			examples: []string{
				"TERMGATE_URL=https://gw:8443 TERMGATE_TOKEN=... termgate mcp      # an agent starts it; MCP over stdio",
				"termgate mcp --url https://gw:8443 --listen 127.0.0.1:7000           # streamable HTTP; clients send their own token",
			},
			run: func(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
				return runMCP(ctx, args, stdin, stdout, stderr)
			},
			flags: func() *flag.FlagSet { return mcpFlags(new(mcpOptions)) },
		},
		{
			name: "ports", args: "[flags] ID",
			summary:  "list the TCP ports an execution's programs listen on",
			examples: []string{"termgate ports build-7"},
			run:      runPorts,
			flags:    func() *flag.FlagSet { return newClientFlagSet("ports", new(clientFlags)) },
		},
		{
			name: "logs", args: "--id ID [flags]",
			summary: "print an execution's retained output",
			examples: []string{
				"termgate logs --id build-7",
				"termgate logs --id build-7 --follow",
				"termgate logs --id build-7 --after 120 --incarnation ibkmyrxe76hfcct7",
			},
			run: func(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
				return runLogs(ctx, args, stdout, stderr)
			},
			flags: func() *flag.FlagSet { return logsFlags(new(logsOptions)) },
		},
		{
			name: "cancel", args: "--id ID [flags]",
			summary:  "cancel an execution",
			examples: []string{"termgate cancel --id build-7"},
			run: func(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
				return runCancel(ctx, args, stdout, stderr)
			},
			flags: func() *flag.FlagSet { return cancelFlags(new(cancelOptions)) },
		},
		{
			name: "token", args: "--secret-file FILE --tenant TENANT [flags]",
			summary: "mint a development token (HS256)",
			examples: []string{
				"termgate token --secret-file ~/.local/state/termgate/dev-secret --tenant dev",
				"export TERMGATE_TOKEN=$(termgate token --secret-file /etc/termgate/secret --tenant acme --ttl 8h)",
				"termgate token --secret-file /etc/termgate/secret --tenant acme --scope exec:attach   # watch only",
			},
			run: func(_ context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
				return runToken(args, stdout, stderr)
			},
			flags:  func() *flag.FlagSet { return tokenFlags(new(tokenOptions)) },
			values: map[string]completes{"secret-file": aFile},
		},
		{
			name: "completion", args: "bash|zsh|fish",
			summary: "print a shell completion script",
			examples: []string{
				"source <(termgate completion bash)                                  # in ~/.bashrc",
				"termgate completion zsh > \"${fpath[1]}/_termgate\"                   # then restart zsh",
				"termgate completion fish > ~/.config/fish/completions/termgate.fish",
			},
			run: func(_ context.Context, args []string, _ io.Reader, stdout, _ io.Writer) error {
				return runCompletion(args, stdout)
			},
			flags:    func() *flag.FlagSet { return newFlagSet("completion") },
			operands: func() []string { return shells },
		},
		{
			name: "manifest", args: "systemd|nginx|caddy|kubernetes|haproxy|seccomp|apparmor [flags]",
			summary: "print a systemd unit, an nginx or Caddy reverse proxy, Kubernetes manifests, an HAProxy configuration for many nodes, or the seccomp and AppArmor profiles of a container, for serve",
			examples: []string{
				"termgate manifest systemd --jwt-secret-file /etc/termgate/secret --workspace-root /var/lib/termgate/workspaces \\\n      > /etc/systemd/system/termgate.service",
				"termgate manifest systemd --binary /usr/bin/termgate --dev",
				"termgate manifest nginx --server-name gateway.example.com > /etc/nginx/conf.d/termgate.conf",
				"termgate manifest caddy --server-name gateway.example.com > /etc/caddy/termgate.caddy",
				"termgate manifest kubernetes --image registry.example/termgate:1.4 --namespace tools --max-running 64 > termgate.yaml",
				"termgate manifest haproxy --server termgate-0=10.0.0.1:8080 --server termgate-1=10.0.0.2:8080 > /etc/haproxy/haproxy.cfg",
				"termgate manifest seccomp > /var/lib/kubelet/seccomp/termgate.json    # a container's seccomp profile",
				"termgate manifest haproxy --help                                    # each kind's flags",
			},
			run:      runManifest,
			flags:    manifestFlagSet,
			kinds:    manifestKindCommands,
			operands: func() []string { return manifestKinds },
		},
		{
			name: "version", summary: "print the version and commit (also --version)",
			examples: []string{"termgate version", "termgate --version"},
			run: func(_ context.Context, args []string, _ io.Reader, stdout, _ io.Writer) error {
				fs := newFlagSet("version")
				if err := parseFlags(fs, args); err != nil {
					return err
				}
				if fs.NArg() > 0 {
					return usageError{fmt.Errorf("version: unexpected argument %q", fs.Arg(0))}
				}
				printVersion(stdout)
				return nil
			},
			flags: func() *flag.FlagSet { return newFlagSet("version") },
		},
		{
			name: "help", args: "[COMMAND [KIND]]", summary: "print help, for one command (or manifest's kind) with its flags and examples",
			examples: []string{"termgate help", "termgate help run", "termgate help manifest haproxy"},
			run: func(_ context.Context, args []string, _ io.Reader, stdout, _ io.Writer) error {
				return runHelp(args, stdout)
			},
			flags:    func() *flag.FlagSet { return newFlagSet("help") },
			operands: commandNames,
		},
	}
}

// execExits is exec's table of exit statuses for help and docs/cli.md.
const execExits = `  0-255  the command's own status: its exit code, 128+n for signal n, except:
  126    the sandbox could not be set up, or the command cannot run (a directory, no
         permission, a working directory that cannot be entered); termgate's init
         names the problem
  127    the command does not exist
  2      a bad command line
`

// commandNamed returns the command called name.
func commandNamed(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// dispatch runs the command args name; help requested or a flag error
// print that command's help, to stdout and stderr.
func dispatch(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	switch args[0] {
	case "--version":
		args[0] = "version"
	case "-h", "--help", "-help":
		args[0] = "help"
	}
	switch args[0] {
	case keeperArg:
		return runKeeper(ctx, args[1:], stderr)
	case cliDocArg:
		return runCLIDoc(args[1:])
	}
	c, ok := commandNamed(args[0])
	if !ok {
		printUsage(stderr)
		return usageError{fmt.Errorf("unknown command %q", args[0])}
	}
	err := c.run(ctx, args[1:], stdin, stdout, stderr)
	var h helpRequest
	var fe flagError
	switch {
	case errors.As(err, &h):
		printHelp(stdout, c, h.fs)
		return nil
	case errors.As(err, &fe):
		printHelp(stderr, c, fe.fs)
	}
	return err
}

// keeperArg, as the first argument, makes termgate the keeper of a state
// directory (durable_linux.go). serve starts it; it is no command for
// people, so neither help nor completion lists it.
const keeperArg = "__keeper"

// newFlagSet returns an empty flag set for termgate name. It prints
// nothing itself: dispatch prints help, with double dashes.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("termgate "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parseFlags parses args into fs. Asking for help returns a helpRequest,
// a bad flag a usageError holding a flagError: dispatch prints the help.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return helpRequest{fs}
		}
		return usageError{flagError{fs, err}}
	}
	return nil
}

// helpRequest is --help (or -h) on a command line: exit status 0.
type helpRequest struct{ fs *flag.FlagSet }

func (helpRequest) Error() string        { return errHelp.Error() }
func (helpRequest) Is(target error) bool { return target == errHelp }

// flagError is a flag the flag package refused, said with double dashes.
type flagError struct {
	fs  *flag.FlagSet
	err error
}

func (e flagError) Error() string {
	msg := e.err.Error()
	for _, p := range []string{"not defined: -", "for flag -", "needs an argument: -", "syntax: -"} {
		msg = strings.Replace(msg, p, p+"-", 1)
	}
	return msg
}

func (e flagError) Unwrap() error { return e.err }
