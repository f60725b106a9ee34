//go:build linux

package sandbox

import (
	"testing"

	"golang.org/x/sys/unix"
)

func exited(code int) unix.WaitStatus        { return unix.WaitStatus(code << 8) }
func signaled(s unix.Signal) unix.WaitStatus { return unix.WaitStatus(s) }

func TestClassify(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		facts exitFacts
		want  Exit
	}{
		{"exact code", exitFacts{exact: true, execed: true, workload: exited(3), outer: exited(3)}, Exit{Code: 3, Exact: true}},
		{"exact code above 128", exitFacts{exact: true, execed: true, workload: exited(137), outer: exited(137)}, Exit{Code: 137, Exact: true}},
		{"exact signal", exitFacts{exact: true, execed: true, workload: signaled(unix.SIGTERM), outer: exited(143)}, Exit{Code: -1, Signal: unix.SIGTERM, Exact: true}},
		{"setup failure", exitFacts{exact: true, outer: exited(1), setupMsg: "bwrap: Can't mount"}, Exit{Code: -1, SetupError: "bwrap: Can't mount", Exact: true}},
		{"inferred signal", exitFacts{outer: exited(137)}, Exit{Code: -1, Signal: unix.SIGKILL}},
		{"kept command code over bwrap's kill", exitFacts{kept: true, workload: exited(21), outer: exited(137)}, Exit{Code: 21}},
		{"kept command signal", exitFacts{kept: true, workload: signaled(unix.SIGTERM), outer: exited(137)}, Exit{Code: -1, Signal: unix.SIGTERM}},
		{"inferred setup failure", exitFacts{outer: exited(1), setupMsg: "bwrap: execvp x"}, Exit{Code: -1, SetupError: "bwrap: execvp x"}},
		{"missing command", exitFacts{exact: true, outer: exited(127), initErr: "x: command not found", notFound: true},
			Exit{Code: -1, SetupError: "x: command not found", NotFound: true, Exact: true}},
		{"missing command without events", exitFacts{outer: exited(127), initErr: "x: command not found", notFound: true},
			Exit{Code: -1, SetupError: "x: command not found", NotFound: true}},
		{"missing working directory", exitFacts{exact: true, outer: exited(126), initErr: "cannot change directory to /w: no such file or directory"},
			Exit{Code: -1, SetupError: "cannot change directory to /w: no such file or directory", Exact: true}},
		{"missing init", exitFacts{exact: true, outer: exited(1), setupMsg: "bwrap: execvp " + initPath + ": No such file or directory"},
			Exit{Code: -1, SetupError: "bwrap: execvp " + initPath + ": No such file or directory", Exact: true}},
		{"stopped before the command ran is no setup failure", exitFacts{exact: true, outer: signaled(unix.SIGKILL), killedUs: true, stoppedAs: StopCancel},
			Exit{Code: -1, Signal: unix.SIGKILL, Exact: true, Stopped: StopCancel}},
		{"a setup failure while stopping still is one", exitFacts{exact: true, outer: exited(1), setupMsg: "bwrap: Can't mount", killedUs: true, stoppedAs: StopTimeout},
			Exit{Code: -1, SetupError: "bwrap: Can't mount", Exact: true, Stopped: StopTimeout}},
		{"memory", exitFacts{exact: true, execed: true, workload: signaled(unix.SIGKILL), oomKills: 1}, Exit{Code: -1, Signal: unix.SIGKILL, Limit: LimitMemory, Exact: true}},
		{"cpu by SIGKILL at soft = hard", exitFacts{exact: true, execed: true, workload: signaled(unix.SIGKILL), cpuLimit: true}, Exit{Code: -1, Signal: unix.SIGKILL, Limit: LimitCPU, Exact: true}},
		{"our kill is no cpu ceiling", exitFacts{exact: true, execed: true, workload: signaled(unix.SIGKILL), cpuLimit: true, killedUs: true, stoppedAs: StopCancel}, Exit{Code: -1, Signal: unix.SIGKILL, Exact: true, Stopped: StopCancel}},
		{"file size", exitFacts{exact: true, execed: true, workload: signaled(unix.SIGXFSZ)}, Exit{Code: -1, Signal: unix.SIGXFSZ, Limit: LimitFileSize, Exact: true}},
		{"pids", exitFacts{exact: true, execed: true, workload: exited(2), pidsHits: 4}, Exit{Code: 2, Limit: LimitPids, Exact: true}},
		{"keeper lost", exitFacts{exact: true, execed: true, workload: signaled(unix.SIGKILL), outer: signaled(unix.SIGKILL), lost: true, killedUs: true, stoppedAs: StopCancel},
			Exit{Code: -1, Lost: true, Stopped: StopCancel}},
		{"success ignores counters", exitFacts{exact: true, execed: true, workload: exited(0), pidsHits: 4}, Exit{Code: 0, Exact: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if got := classify(c.facts); got != c.want {
				t.Errorf("classify = %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestExitStatus(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		e    Exit
		want int
	}{{Exit{Code: 3}, 3}, {Exit{Code: -1, Signal: unix.SIGINT}, 130}, {Exit{Code: -1, SetupError: "x"}, 126}, {Exit{Code: -1, SetupError: "x", NotFound: true}, 127},
		{Exit{Code: -1, Lost: true}, 255}, {Exit{Code: -1, Detached: true}, 255}} {
		if got := c.e.Status(); got != c.want {
			t.Errorf("%+v.Status() = %d, want %d", c.e, got, c.want)
		}
		if (c.e.Lost || c.e.Detached) && c.e.Success() {
			t.Errorf("%+v.Success() is true", c.e)
		}
	}
}
