//go:build linux

package sandbox

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
)

func TestPTY(t *testing.T) {
	t.Parallel()
	l := needLauncher(t)
	t.Run("size, controlling terminal and resize", func(t *testing.T) {
		t.Parallel()
		var out sandboxtest.SyncBuffer
		proc, err := l.Start(t.Context(), Policy{
			Command:   sh(`stty size; test -t 0 && echo is-tty; ps -o stat= -p $$ | grep -q s && echo session-leader; echo ready; read x; stty size`),
			Workspace: sandboxtest.Dir(t), TTY: &WindowSize{Rows: 30, Cols: 100}, Proc: ProcPrivate,
		}, Stdio{Stdout: &out})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, &out, "ready")
		if err := proc.Resize(WindowSize{Rows: 40, Cols: 120}); err != nil {
			t.Fatal(err)
		}
		proc.Stdin().Write([]byte("\n"))
		exit := proc.Wait()
		got := strings.ReplaceAll(out.String(), "\r", "")
		for _, want := range []string{"30 100\n", "is-tty\n", "session-leader\n", "40 120\n"} {
			if !strings.Contains(got, want) {
				t.Errorf("missing %q in %q (%s)", want, got, exit)
			}
		}
	})
	t.Run("bash has job control and ^C interrupts the foreground job", func(t *testing.T) {
		t.Parallel()
		var out sandboxtest.SyncBuffer
		proc, err := l.Start(t.Context(), Policy{
			Command: []string{"/bin/bash", "--norc", "-i"}, Env: map[string]string{"PS1": "$ "},
			Workspace: sandboxtest.Dir(t), TTY: &WindowSize{Rows: 24, Cols: 80},
		}, Stdio{Stdout: &out})
		if err != nil {
			t.Fatal(err)
		}
		in := proc.Stdin()
		// Wait for what bash prints, not for the terminal's echo of the line.
		in.Write([]byte("echo flags=$-; echo ran-$((6*7)); sleep 100\n"))
		waitFor(t, &out, "ran-42")
		time.Sleep(100 * time.Millisecond) // let sleep become the foreground job
		in.Write([]byte{3})
		in.Write([]byte("echo after-interrupt; exit 4\n"))
		exit := proc.Wait()
		got := out.String()
		if strings.Contains(got, "no job control") || !regexp.MustCompile(`flags=\S*m`).MatchString(got) || !strings.Contains(got, "after-interrupt") || exit.Code != 4 {
			t.Errorf("job control: %s, output %q", exit, got)
		}
	})
	t.Run("TIOCSTI and TIOCLINUX are denied, high bits included", func(t *testing.T) {
		t.Parallel()
		var out sandboxtest.SyncBuffer
		proc, err := l.Start(t.Context(), Policy{
			Command:   []string{"/usr/bin/perl", "-e", `my $c = "x"; for my $n (0x5412, 0x100005412, 0x541C, 0xffffffff00005412) { print ioctl(STDIN, $n, $c) ? "ALLOWED $n\n" : "denied $!\n" }`},
			Workspace: sandboxtest.Dir(t), TTY: &WindowSize{Rows: 24, Cols: 80},
		}, Stdio{Stdout: &out})
		if err != nil {
			t.Fatal(err)
		}
		exit := proc.Wait()
		got := strings.ReplaceAll(out.String(), "\r", "")
		if strings.Count(got, "denied Operation not permitted\n") != 4 {
			t.Errorf("terminal injection: %s, output %q", exit, got)
		}
	})
	t.Run("resize needs a terminal", func(t *testing.T) {
		t.Parallel()
		proc, err := l.Start(t.Context(), Policy{Command: []string{"true"}, Workspace: sandboxtest.Dir(t)}, Stdio{})
		if err != nil {
			t.Fatal(err)
		}
		if err := proc.Resize(WindowSize{Rows: 1, Cols: 1}); err == nil {
			t.Error("resize of a pipe execution succeeded")
		}
		proc.Wait()
	})
}
