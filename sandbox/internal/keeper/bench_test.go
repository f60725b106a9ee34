//go:build linux

package keeper

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BenchmarkIdleChildren reports the keeper's resident memory holding 200
// idle children, each with a held descriptor, as a gateway would leave them.
func BenchmarkIdleChildren(b *testing.B) {
	const n = 200
	dir := benchDir(b)
	ks := &keeperProcs{dir: dir, env: []string{roleEnv + "=keeper", dirEnv + "=" + dir,
		graceEnv + "=1m", killGraceEnv + "=1s", lingerEnv + "=5s"}}
	defer ks.killAll()
	c, err := Dial(b.Context(), dir, ks.start)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Detach()
	null, _ := os.Open(os.DevNull)
	defer null.Close()
	base := rss(b, ks.last().cmd.Process.Pid)
	spawnIdle(b, c, null, n)
	time.Sleep(200 * time.Millisecond)
	full := rss(b, ks.last().cmd.Process.Pid)
	for b.Loop() {
	}
	b.ReportMetric(float64(base), "rss_empty_KiB")
	b.ReportMetric(float64(full), "rss_200_KiB")
	b.ReportMetric(float64(full-base)/n, "KiB/child")
}

// BenchmarkSpawn compares starting and reaping /bin/true through the
// keeper (spawn, exit report, forget: three messages) with a direct
// exec.Cmd; keeper-spawn-only times the Spawn call alone, and
// keeper-beside-500 the same beside 500 idle children, each with a held
// descriptor and a pidfd in the keeper's table, which a fork from the
// forking thread's own table does not copy (see ownTable).
func BenchmarkSpawn(b *testing.B) {
	viaKeeper := func(b *testing.B, spawnOnly bool, idle int) {
		dir := benchDir(b)
		ks := &keeperProcs{dir: dir, env: []string{roleEnv + "=keeper", dirEnv + "=" + dir,
			graceEnv + "=1m", killGraceEnv + "=1s", lingerEnv + "=5s"}}
		defer ks.killAll()
		c, err := Dial(b.Context(), dir, ks.start)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Detach()
		null, _ := os.Open(os.DevNull)
		defer null.Close()
		spawnIdle(b, c, null, idle)
		i := 0
		for b.Loop() {
			key := "t" + strconv.Itoa(i)
			i++
			if _, err := c.Spawn(b.Context(), SpawnRequest{Key: key, Path: "/bin/true", Files: []*os.File{null, null, null}}); err != nil {
				b.Fatal(err)
			}
			if spawnOnly {
				b.StopTimer()
			}
			<-c.Exit(key)
			if err := c.Forget(key); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	}
	b.Run("keeper", func(b *testing.B) { viaKeeper(b, false, 0) })
	b.Run("keeper-spawn-only", func(b *testing.B) { viaKeeper(b, true, 0) })
	b.Run("keeper-beside-500", func(b *testing.B) { viaKeeper(b, true, 500) })
	b.Run("exec", func(b *testing.B) {
		null, _ := os.Open(os.DevNull)
		defer null.Close()
		for b.Loop() {
			cmd := &exec.Cmd{Path: "/bin/true", Env: []string{}, Stdin: null, Stdout: null, Stderr: null,
				SysProcAttr: &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}}
			if err := cmd.Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// spawnIdle starts n children that sleep, each holding a pipe's read end
// in the keeper, as a gateway leaves idle shells.
func spawnIdle(b testing.TB, c *Client, null *os.File, n int) {
	for i := range n {
		r, w, err := os.Pipe()
		if err != nil {
			b.Fatal(err)
		}
		_, err = c.Spawn(b.Context(), SpawnRequest{Key: "idle" + strconv.Itoa(i), Path: "/bin/sleep", Args: []string{"sleep", "1000"},
			Files: []*os.File{null, w, w}, Held: []*os.File{r}})
		r.Close()
		w.Close()
		if err != nil {
			b.Fatal(err)
		}
	}
}

func benchDir(b *testing.B) string {
	dir, err := os.MkdirTemp("", "kb")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	state := dir + "/s"
	if err := os.Mkdir(state, 0o700); err != nil {
		b.Fatal(err)
	}
	return state
}

// rss returns VmRSS of pid in KiB.
func rss(b *testing.B, pid int) int {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return kb
		}
	}
	b.Fatal("no VmRSS")
	return 0
}
