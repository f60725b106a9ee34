package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// cliInTerminalEnv names the variable that makes the test binary run the
// CLI (its arguments as JSON) instead of tests: tmux starts it so.
const cliInTerminalEnv = "TERMGATE_TEST_CLI_ARGS"

// tmuxTerminal is a tmux server of the test's own, with one window.
type tmuxTerminal struct {
	t      *testing.T
	socket string // the server's socket, in the test's directory
	stderr string // the file the CLI's stderr goes to
}

// startCLIInTmux runs termgate with args in a new tmux window of 100x30,
// a real terminal that answers queries as the user's would.
func startCLIInTmux(t *testing.T, args ...string) *tmuxTerminal {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		sandboxtest.Unavailable(t, "tmux not found (install tmux): %v", err)
	}
	enc, _ := json.Marshal(args)
	dir := t.TempDir()
	tm := &tmuxTerminal{t: t, socket: filepath.Join(dir, "tmux"), stderr: filepath.Join(dir, "stderr")}
	// The window stays after the CLI ends, showing how it ended.
	self := fmt.Sprintf("'%s' '-test.run=^%s$' 2>'%s'; echo \"[exit $?]\"; sleep 600", os.Args[0], t.Name(), tm.stderr)
	tm.run("-f", "/dev/null", "new-session", "-d", "-x", "100", "-y", "30", "-e", cliInTerminalEnv+"="+string(enc), self)
	t.Cleanup(func() { exec.Command("tmux", "-S", tm.socket, "kill-server").Run() })
	return tm
}

// run runs a tmux command on the test's server.
func (tm *tmuxTerminal) run(args ...string) string {
	tm.t.Helper()
	out, err := exec.Command("tmux", append([]string{"-S", tm.socket}, args...)...).CombinedOutput()
	if err != nil {
		tm.t.Fatalf("tmux %q: %v: %s", args, err, out)
	}
	return string(out)
}

// screen is the window's text.
func (tm *tmuxTerminal) screen() string { return tm.run("capture-pane", "-p") }

// quitCLI sends SIGQUIT to the CLI, the child of the window's shell, so
// that its goroutines show in its stderr, and waits a moment for them.
func (tm *tmuxTerminal) quitCLI() {
	pane := strings.TrimSpace(tm.run("list-panes", "-F", "#{pane_pid}"))
	exec.Command("sh", "-c", "kill -QUIT $(ps -o pid= --ppid "+pane+"); sleep 1").Run()
}

// String is what the window shows and what the CLI wrote to stderr.
func (tm *tmuxTerminal) String() string {
	errs, _ := os.ReadFile(tm.stderr)
	return fmt.Sprintf("screen %q, stderr %q", strings.TrimRight(tm.screen(), "\n"), errs)
}

// runCLIFromEnv runs the CLI when the test binary was started for it.
func runCLIFromEnv() {
	enc := os.Getenv(cliInTerminalEnv)
	if enc == "" {
		return
	}
	var args []string
	if err := json.Unmarshal([]byte(enc), &args); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGHUP, os.Interrupt)
	defer stop()
	os.Exit(exitCode(run(ctx, args, os.Stdin, os.Stdout, os.Stderr), os.Stderr))
}

// TestAttachTypesNoReplayedAnswers: termgate attach in a real terminal
// (tmux) replays history that holds terminal queries; tmux answers them,
// and those answers must not reach the shell, while keys typed during and
// after the replay do.
func TestAttachTypesNoReplayedAnswers(t *testing.T) {
	runCLIFromEnv()
	t.Parallel()
	g := startGateway(t, "--ring-bytes", "32M")
	tok := g.token(t, "acme", allScopes)
	// A long history, so that the replay lasts while keys are typed, then
	// queries (DSR 6, DA1, DA2, DSR 5, DECRQM, OSC 11, XTVERSION); then the
	// shell keeps what it is sent, byte for byte.
	script := `seq 1 400000; printf 'history\033[6n\033[c\033[>c\033[5n\033[?1$p\033]11;?\007\033[>0q end\r\n'; ` +
		`stty raw -echo; echo ready; exec cat -v > /workspace/typed`
	e, err := g.owner(t).Start(t.Context(), wire.Request{ID: "queries", Command: "/bin/sh", Args: []string{"-c", script}, PTY: &wire.Size{Rows: 30, Cols: 100}})
	if err != nil {
		t.Fatal(err)
	}
	var seen strings.Builder
	for !strings.Contains(seen.String(), "ready") {
		ev, err := e.Next(t.Context())
		if err != nil {
			t.Fatalf("owner: %v after %q", err, seen.String())
		}
		seen.Write(ev.Data)
	}
	e.Detach(t.Context())
	tm := startCLIInTmux(t, "attach", "--id", "queries", "--url", g.url, "--token", tok)
	if !sandboxtest.Eventually(t, 30*time.Second, func() bool { return strings.ContainsAny(tm.screen(), "0123456789") }) {
		tm.quitCLI()
		t.Fatalf("the replay never started: %v", tm)
	}
	tm.run("send-keys", "-l", "early ")
	during := !strings.Contains(tm.screen(), "ready")
	if !sandboxtest.Eventually(t, 30*time.Second, func() bool { return strings.Contains(tm.screen(), "ready") }) {
		t.Fatalf("the replay never showed: %v", tm)
	}
	// tmux answers at once; a margin on a loaded machine, then keys.
	time.Sleep(time.Second)
	tm.run("send-keys", "-l", "late")
	var typed string
	sandboxtest.Eventually(t, 30*time.Second, func() bool {
		_, typed, _ = runCLI(t, "", "run", "--url", g.url, "--token", tok, "--", "/bin/sh", "-c", "cat /workspace/typed")
		return strings.Contains(typed, "late")
	})
	if typed != "early late" {
		t.Errorf("the shell received %q, want only the typed \"early late\" (%v)", typed, tm)
	}
	if !during {
		t.Log("the replay ended before the first keys were typed: only the dropped answers were checked")
	}
}

// TestAttachAfterEvictionShowsTheScreen: a TUI drew its screen (asking the
// terminal questions on the way) and then made 60,000 small updates, so
// the ring no longer holds what drew it. termgate attach in a real
// terminal (tmux) shows the whole screen from a snapshot, and nothing is
// typed into the program.
func TestAttachAfterEvictionShowsTheScreen(t *testing.T) {
	runCLIFromEnv()
	t.Parallel()
	g := startGateway(t)
	tok := g.token(t, "acme", allScopes)
	script := `printf '\033[?1049h\033[2J\033[H\033[6n\033[c'
i=1; while [ $i -le 20 ]; do printf 'line %d \033[1;3%dmcolour\033[0m\r\n' $i $((i % 8)); i=$((i+1)); done
i=0; while [ $i -lt 60000 ]; do printf '\033[22;1H\033[7mcounter %d\033[0m' $i; i=$((i+1)); done
stty raw -echo; printf ' ready'; exec cat -v > /workspace/typed`
	e, err := g.owner(t).Start(t.Context(), wire.Request{ID: "tui", Command: "/bin/sh", Args: []string{"-c", script}, PTY: &wire.Size{Rows: 30, Cols: 100}})
	if err != nil {
		t.Fatal(err)
	}
	var tailOut []byte
	for !strings.Contains(string(tailOut), "ready") {
		ev, err := e.Next(t.Context())
		if err != nil {
			t.Fatalf("owner: %v", err)
		}
		tailOut = append(tailOut, ev.Data...)
		tailOut = tailOut[max(0, len(tailOut)-64):]
	}
	e.Detach(t.Context())
	tm := startCLIInTmux(t, "attach", "--id", "tui", "--url", g.url, "--token", tok)
	want := []string{"line 1 colour", "line 20 colour", "counter 59999 ready"}
	if !sandboxtest.Eventually(t, 30*time.Second, func() bool {
		s := tm.screen()
		for _, w := range want {
			if !strings.Contains(s, w) {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("the screen did not come back: %v", tm)
	}
	time.Sleep(time.Second) // what tmux would answer has arrived by now
	_, typed, _ := runCLI(t, "", "run", "--url", g.url, "--token", tok, "--", "/bin/sh", "-c", "cat /workspace/typed")
	if typed != "" {
		t.Errorf("the program received %q from the reattaching terminal, want nothing (%v)", typed, tm)
	}
}
