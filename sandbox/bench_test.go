//go:build linux

package sandbox

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// firstByte records when output first arrives.
type firstByte struct {
	once sync.Once
	at   time.Time
}

func (f *firstByte) Write(b []byte) (int, error) {
	f.once.Do(func() { f.at = time.Now() })
	return len(b), nil
}

var benchPolicy = Policy{Command: []string{"/bin/echo", "x"}}

// BenchmarkStart measures Start to first output byte and to exit of a
// trivial command, beside plain bwrap run with the same arguments and
// descriptors: the difference is termgate's own overhead (cgroup, process
// events, descriptor setup, output copying).
func BenchmarkStart(b *testing.B) {
	l := needLauncher(b)
	p := benchPolicy
	p.Workspace = sandboxtest.Dir(b)
	b.Run("termgate", func(b *testing.B) {
		var ms float64
		for b.Loop() {
			ms += startFirstByte(b, l, p)
		}
		b.ReportMetric(ms/float64(b.N), "ms-first-byte/op")
	})
	b.Run("bwrap", func(b *testing.B) {
		np := p.Normalize()
		var first time.Duration
		for b.Loop() {
			start := time.Now()
			at, err := plainBwrap(l, np)
			if err != nil {
				b.Fatal(err)
			}
			first += at.Sub(start)
		}
		b.ReportMetric(float64(first.Microseconds())/float64(b.N)/1000, "ms-first-byte/op")
	})
	// The same with serve's default ceilings, in cgroups of every
	// hierarchy.
	limited := p
	limited.Limits = Limits{Memory: 1 << 30, Pids: 512, FileSize: 1 << 30, CPUWeight: 100}
	// And through a keeper, as serve starts them by default (its CPU is
	// not counted: the keeper is no child of this process).
	for _, v := range []struct {
		name string
		p    Policy
		l    func() *Launcher
	}{
		{"paired", p, func() *Launcher { return l }},
		{"paired-limits", limited, func() *Launcher { return l }},
		{"paired-keeper", p, func() *Launcher { return keeperLauncher(b, keeperDir(b)) }},
	} {
		b.Run(v.name, func(b *testing.B) {
			l := v.l()
			// A termgate start and a plain bwrap per iteration, in turns
			// first: both see the same load, so the ratio holds on a busy
			// machine where the two runs above, seconds apart, do not.
			// CPU: of this process and of every process it reaped, bwrap
			// and what bwrap reaped, per start.
			np := v.p.Normalize()
			var ours, plain, ratios []float64
			var oursCPU, plainCPU time.Duration
			for i := 0; b.Loop(); i++ {
				var t, w float64
				if i%2 == 0 {
					t, w = cpuOf(b, &oursCPU, func() float64 { return startFirstByte(b, l, v.p) }), cpuOf(b, &plainCPU, func() float64 { return plainFirstByte(b, l, np) })
				} else {
					w, t = cpuOf(b, &plainCPU, func() float64 { return plainFirstByte(b, l, np) }), cpuOf(b, &oursCPU, func() float64 { return startFirstByte(b, l, v.p) })
				}
				ours, plain, ratios = append(ours, t), append(plain, w), append(ratios, t/w)
			}
			b.ReportMetric(median(ours), "ms-first-byte")
			b.ReportMetric(median(plain), "ms-first-byte-bwrap")
			b.ReportMetric(100*(median(ratios)-1), "%-overhead")
			b.ReportMetric(float64(oursCPU.Microseconds())/1000/float64(b.N), "cpu-ms/op")
			b.ReportMetric(float64(plainCPU.Microseconds())/1000/float64(b.N), "cpu-ms-bwrap/op")
		})
	}
}

// cpuOf runs f and adds the CPU time it took to *sum: this process's and
// that of the processes it reaped meanwhile.
func cpuOf(b testing.TB, sum *time.Duration, f func() float64) float64 {
	before := cpuTime(b) + childCPUTime(b)
	ms := f()
	*sum += cpuTime(b) + childCPUTime(b) - before
	return ms
}

// childCPUTime returns the CPU time of the reaped children of this process
// and of theirs, user and system.
func childCPUTime(b testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// startFirstByte runs p to its end and returns the milliseconds from Start
// to its first output byte.
func startFirstByte(b testing.TB, l *Launcher, p Policy) float64 {
	if l.keeper != nil {
		p.Key = fmt.Sprintf("bench-%d", startKeys.Add(1)) // starts through a keeper need one
	}
	var fb firstByte
	start := time.Now()
	proc, err := l.Start(context.Background(), p, Stdio{Stdout: &fb})
	if err != nil {
		b.Fatal(err)
	}
	if exit := proc.Wait(); !exit.Success() {
		b.Fatal(exit)
	}
	if err := proc.Release(); err != nil { // a keeper keeps it until then
		b.Fatal(err)
	}
	return fb.at.Sub(start).Seconds() * 1000
}

// startKeys numbers the keys of the starts through a keeper.
var startKeys atomic.Int64

// plainFirstByte is startFirstByte of plainBwrap.
func plainFirstByte(b testing.TB, l *Launcher, p Policy) float64 {
	start := time.Now()
	at, err := plainBwrap(l, p)
	if err != nil {
		b.Fatal(err)
	}
	return at.Sub(start).Seconds() * 1000
}

// median returns the middle of xs, which it sorts.
func median(xs []float64) float64 {
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// plainBwrap runs bwrap with the plan termgate would use, but running the
// command itself with bwrap's own --setenv instead of termgate's init, and
// without a cgroup, process events or supervision, forked from the host's
// mount namespace; it returns when output first arrived.
func plainBwrap(l *Launcher, p Policy) (time.Time, error) { return plainBwrapFrom(l, p, false, nil) }

// plainBwrapFrom is plainBwrap, forked by the launcher's forking thread
// from a lean mount namespace (mountns) when lean, as termgate forks,
// and without the plan's operations that drop accepts (withoutOps).
func plainBwrapFrom(l *Launcher, p Policy, lean bool, drop func(op []string) bool) (time.Time, error) {
	var edit func([]string) ([]string, error)
	if drop != nil {
		edit = func(opts []string) ([]string, error) { return withoutOps(opts, drop) }
	}
	var fb firstByte
	err := l.runBare(p, lean, edit, &fb)
	return fb.at, err
}

// ptyBenchBytes is what BenchmarkPTYThroughput's command prints.
const ptyBenchBytes = 32 << 20

// benchLaunchers are the two ways of forking: the launcher's own child
// ("exec"), and the keeper's ("keeper"), beside each other in one run.
func benchLaunchers(b *testing.B) []struct {
	name string
	l    *Launcher
} {
	return []struct {
		name string
		l    *Launcher
	}{{"exec", needLauncher(b)}, {"keeper", keeperLauncher(b, keeperDir(b))}}
}

// BenchmarkPTYThroughput measures a PTY's output read into a 1 MiB
// circular buffer, as a ring keeps it: copied from the copier's own buffer
// by Write ("write"), or read straight into the buffer's memory through a
// reservation ("reserve"), with bwrap forked by the launcher or by the
// keeper; and the CPU time of this process (the copier, mostly) per MiB.
func BenchmarkPTYThroughput(b *testing.B) {
	p := Policy{Command: sh(fmt.Sprintf("stty raw -echo; head -c %d /dev/zero", ptyBenchBytes)), Workspace: sandboxtest.Dir(b), TTY: &WindowSize{Rows: 24, Cols: 80}}
	for _, fork := range benchLaunchers(b) {
		for _, v := range []struct {
			name string
			out  func(*circular) io.Writer
		}{{"write", func(c *circular) io.Writer { return writeOnly{c} }}, {"reserve", func(c *circular) io.Writer { return c }}} {
			b.Run(fork.name+"/"+v.name, func(b *testing.B) {
				b.SetBytes(ptyBenchBytes)
				events := 0
				cpu := cpuTime(b)
				for b.Loop() {
					c := &circular{buf: make([]byte, 1<<20)}
					p.Key = randomName()
					proc, err := fork.l.Start(context.Background(), p, Stdio{Stdout: v.out(c)})
					if err != nil {
						b.Fatal(err)
					}
					if exit := proc.Wait(); !exit.Success() || c.total != ptyBenchBytes {
						b.Fatalf("%s, %d bytes", exit, c.total)
					}
					proc.Release()
					events += c.events
				}
				b.ReportMetric(float64(b.N)*ptyBenchBytes/float64(events), "B/event")
				b.ReportMetric(float64((cpuTime(b)-cpu).Microseconds())/1000/float64(b.N*ptyBenchBytes>>20), "cpu-ms/MiB")
			})
		}
	}
}

// cpuTime returns the CPU time this process used so far, user and
// system: the copier's cost, steadier than throughput on a loaded machine.
func cpuTime(b testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkEcho measures a keystroke's round trip through a PTY (cat in
// raw mode), with bwrap forked by the launcher or by the keeper, the
// output written ("write") or read into lent memory ("reserve").
func BenchmarkEcho(b *testing.B) {
	for _, fork := range benchLaunchers(b) {
		for _, v := range []struct {
			name string
			out  func(*echoOutput) io.Writer
		}{{"write", func(e *echoOutput) io.Writer { return e }}, {"reserve", func(e *echoOutput) io.Writer { return &lendingEcho{echoOutput: e} }}} {
			b.Run(fork.name+"/"+v.name, func(b *testing.B) {
				echo := &echoOutput{arrived: make(chan struct{}, 1)}
				cat, err := fork.l.Start(context.Background(), Policy{Key: randomName(),
					Command: sh("stty raw -echo; echo ready; exec cat"), Workspace: sandboxtest.Dir(b), TTY: &WindowSize{Rows: 24, Cols: 80},
				}, Stdio{Stdout: v.out(echo)})
				if err != nil {
					b.Fatal(err)
				}
				defer benchStopAll([]*Process{cat})
				if !echo.waitLen(len("ready\n"), 60*time.Second) {
					b.Fatalf("cat not ready: %q", echo.text())
				}
				var rtts []time.Duration
				for b.Loop() {
					rtts = append(rtts, benchKeys(b, cat, echo, 100)...)
				}
				slices.Sort(rtts)
				b.ReportMetric(benchQuantile(rtts, 0.50)*1000, "p50-us")
			})
		}
	}
}

// lendingEcho is an echoOutput whose output is read into memory it lends.
type lendingEcho struct {
	*echoOutput
	mem  []byte
	lent int
}

func (e *lendingEcho) Reserve(max int) {
	if len(e.mem) < max {
		e.mem = make([]byte, max)
	}
	e.lent = 0
}

func (e *lendingEcho) Extend(k int) []byte {
	e.lent += k
	return e.mem[e.lent-k : e.lent]
}

func (e *lendingEcho) Commit(n int) error {
	e.Write(e.mem[:n])
	return nil
}

// circular keeps the last bytes written in a fixed buffer, as a ring does.
type circular struct {
	buf    []byte
	off    int // where the next event starts
	lent   int // the bytes lent to the outstanding event
	total  int
	events int
}

func (c *circular) Write(b []byte) (int, error) {
	for len(b) > 0 {
		k := min(len(b), len(c.buf))
		c.Reserve(k)
		n := copy(c.Extend(k), b)
		c.Commit(n)
		b = b[n:]
	}
	return 0, nil
}

func (c *circular) Reserve(max int) {
	if c.off+max > len(c.buf) {
		c.off = 0
	}
	c.lent = 0
}

func (c *circular) Extend(k int) []byte {
	c.lent += k
	return c.buf[c.off+c.lent-k : c.off+c.lent]
}

func (c *circular) Commit(n int) error {
	c.off += n
	c.total += n
	c.events++
	return nil
}

// writeOnly hides a circular's Reserver.
type writeOnly struct{ c *circular }

func (w writeOnly) Write(b []byte) (int, error) { return w.c.Write(b) }

// BenchmarkKeeperMemory reports the keeper's resident memory per idle
// execution (a PTY shell or a pipe reader, half each), over 50 of them.
func BenchmarkKeeperMemory(b *testing.B) {
	const n = 50
	l := keeperLauncher(b, keeperDir(b))
	ws := sandboxtest.Dir(b)
	for b.Loop() {
		before := rssKiB(b, keeperPid(l))
		procs := make([]*Process, 0, n)
		for i := range n {
			p := Policy{Key: randomName(), Command: sh("echo up; exec cat"), Workspace: ws}
			if i%2 == 0 {
				p.TTY = &WindowSize{Rows: 24, Cols: 80}
			}
			up := &echoOutput{arrived: make(chan struct{}, 1)}
			proc, err := l.Start(context.Background(), p, Stdio{Stdout: up})
			if err != nil {
				b.Fatal(err)
			}
			procs = append(procs, proc)
			up.waitLen(3, 30*time.Second)
		}
		after := rssKiB(b, keeperPid(l))
		benchStopAll(procs)
		b.ReportMetric(float64(after-before)/n, "KiB/execution")
	}
}

// rssKiB reads a process's resident set size.
func rssKiB(b *testing.B, pid int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kib int
			fmt.Sscanf(strings.TrimSpace(v), "%d", &kib)
			return kib
		}
	}
	b.Fatal("no VmRSS")
	return 0
}

// BenchmarkPolicyCost starts sandboxes of bash printing a line, 16 at a
// time as termgate-load opens 500 shells, with plain bwrap and nothing of
// termgate's around it: the floor ("floor": --unshare-all with
// /usr, its links, /proc and /dev), and the plan termgate gives a PTY
// shell ("plan": its namespaces and identity, /etc, /dev, the masked
// /proc, the tmpfs, the workspace and init binds, the seccomp filter,
// forked from a lean mount namespace as termgate forks; the command run
// directly, without the init, a cgroup or a keeper). Their gap is what
// the sandbox's policy costs by itself. The plan is also run without the
// parts that cost most (what lightening the policy would buy): the
// /proc masks ("plan-no-proc-masks"), the /etc binds
// ("plan-no-etc-binds"), or both. An iteration starts a round of
// policyRound at once; ms/start is the wall time over the starts. The CPU
// is the whole machine's per start (/proc/stat), as the kernel tears
// namespaces down on its own threads, which no process's usage counts: a
// figure for a quiet machine.
func BenchmarkPolicyCost(b *testing.B) {
	l := needLauncher(b)
	command := []string{"/usr/bin/bash", "--noprofile", "--norc", "-c", "echo x"}
	shell := Policy{Command: command, Workspace: sandboxtest.Dir(b), TTY: &WindowSize{Rows: 24, Cols: 80},
		PTYs: 1, Proc: ProcPrivate}.Normalize()
	floor := []string{"--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
		"--symlink", "usr/lib64", "/lib64", "--proc", "/proc", "--dev", "/dev",
		"--unshare-all", "--die-with-parent", "--cap-drop", "ALL"}
	floor = append(floor, command...)
	for _, v := range []struct {
		name  string
		start func() error
	}{
		{"floor", func() error { return exec.Command(l.bwrap, floor...).Run() }},
		{"plan", func() error { _, err := plainBwrapFrom(l, shell, true, nil); return err }},
		{"plan-no-proc-masks", func() error { _, err := plainBwrapFrom(l, shell, true, isProcMask); return err }},
		{"plan-no-etc-binds", func() error { _, err := plainBwrapFrom(l, shell, true, isEtcBind); return err }},
		{"plan-no-either", func() error {
			_, err := plainBwrapFrom(l, shell, true, func(op []string) bool { return isProcMask(op) || isEtcBind(op) })
			return err
		}},
	} {
		b.Run(v.name, func(b *testing.B) {
			before, start := sandboxtest.MachineBusy(b), time.Now()
			for b.Loop() {
				var wg sync.WaitGroup
				for range policyRound {
					wg.Go(func() {
						if err := v.start(); err != nil {
							b.Error(err)
						}
					})
				}
				wg.Wait()
			}
			starts := float64(b.N * policyRound)
			b.ReportMetric(float64(time.Since(start).Microseconds())/1000/starts, "ms/start")
			b.ReportMetric(float64((sandboxtest.MachineBusy(b)-before).Microseconds())/1000/starts, "machine-cpu-ms/start")
		})
	}
}

// isProcMask reports whether op is one of the plan's masks over an entry
// of /proc (procMasks), not the mount of /proc itself.
func isProcMask(op []string) bool { return strings.HasPrefix(opDest(op), "/proc/") }

// isEtcBind reports whether op binds an /etc entry (etcEntry), rather than
// copying or linking it.
func isEtcBind(op []string) bool {
	return op[0] == "--ro-bind" && strings.HasPrefix(opDest(op), "/etc/")
}

// bwrapArity is how many arguments each option a plan uses takes.
var bwrapArity = map[string]int{
	"--unshare-user": 0, "--unshare-pid": 0, "--unshare-ipc": 0, "--unshare-cgroup": 0, "--unshare-uts": 0,
	"--unshare-net": 0, "--disable-userns": 0, "--die-with-parent": 0, "--new-session": 0, "--clearenv": 0,
	"--uid": 1, "--gid": 1, "--hostname": 1, "--cap-drop": 1, "--chdir": 1, "--seccomp": 1, "--size": 1,
	"--perms": 1, "--tmpfs": 1, "--remount-ro": 1, "--dev": 1, "--proc": 1,
	"--ro-bind": 2, "--bind": 2, "--symlink": 2, "--file": 2, "--ro-bind-fd": 2, "--bind-fd": 2, "--setenv": 2,
}

// opDest is where op acts in the sandbox, "" for an option that mounts
// or makes nothing.
func opDest(op []string) string {
	switch op[0] {
	case "--tmpfs", "--remount-ro", "--dev", "--proc":
		return op[1]
	case "--ro-bind", "--bind", "--symlink", "--file", "--ro-bind-fd", "--bind-fd":
		return op[2]
	}
	return ""
}

// withoutOps returns bwrap's options opts without the operations drop
// accepts, each with the --size or --perms that applies to it.
func withoutOps(opts []string, drop func(op []string) bool) ([]string, error) {
	var out, modifiers []string
	for i := 0; i < len(opts); {
		n, ok := bwrapArity[opts[i]]
		if !ok || i+n >= len(opts) {
			return nil, fmt.Errorf("option %q at %d: not one withoutOps knows, or short of arguments", opts[i], i)
		}
		op := opts[i : i+1+n]
		i += 1 + n
		switch {
		case op[0] == "--size" || op[0] == "--perms":
			modifiers = append(modifiers, op...)
			continue
		case !drop(op):
			out = append(append(out, modifiers...), op...)
		}
		modifiers = modifiers[:0]
	}
	return out, nil
}

// policyRound is how many sandboxes an iteration of BenchmarkPolicyCost
// starts at once: the load tool's 16, and at -benchtime=1x enough CPU
// time to read in /proc/stat's 10 ms ticks.
const policyRound = 16

// TestWithoutOps checks the trimming BenchmarkPolicyCost's variants rely
// on: every option of a PTY shell's plan is known, the masks go with the
// --size before them and leave /proc mounted, the /etc binds go and the
// copies and links stay.
func TestWithoutOps(t *testing.T) {
	t.Parallel()
	layout := testLayout
	layout.procMasked = map[string]bool{"/proc/kallsyms": false, "/proc/acpi": true}
	p := Policy{Command: []string{"/usr/bin/bash"}, Workspace: "/srv/ws/tenant", TTY: &WindowSize{Rows: 24, Cols: 80},
		PTYs: 1, Proc: ProcPrivate}.Normalize()
	opts := buildPlan(p, layout, []byte{1, 2, 3, 4, 5, 6, 7, 8}).opts
	drop := func(dropped *[][]string, pred func([]string) bool) func([]string) bool {
		return func(op []string) bool {
			if pred(op) {
				*dropped = append(*dropped, slices.Clone(op))
				return true
			}
			return false
		}
	}
	if got, err := withoutOps(opts, func([]string) bool { return false }); err != nil || !slices.Equal(got, opts) {
		t.Fatalf("dropping nothing: %v\n%q\nwant %q", err, got, opts)
	}
	var masks, binds [][]string
	noMasks, err := withoutOps(opts, drop(&masks, isProcMask))
	if err != nil {
		t.Fatal(err)
	}
	if want := [][]string{{"--ro-bind", "/dev/null", "/proc/kallsyms"}, {"--tmpfs", "/proc/acpi"}, {"--remount-ro", "/proc/acpi"}}; !slices.EqualFunc(masks, want, slices.Equal) {
		t.Errorf("masks dropped: %q, want %q", masks, want)
	}
	if len(noMasks) != len(opts)-len(masks[0])-len(masks[1])-len(masks[2])-2 || !hasSeq(noMasks, "--proc", "/proc") ||
		hasSeq(noMasks, "--size", "4096") {
		t.Errorf("without the masks (and the tmpfs's --size):\n%q", noMasks)
	}
	noBinds, err := withoutOps(opts, drop(&binds, isEtcBind))
	if err != nil {
		t.Fatal(err)
	}
	if want := [][]string{{"--ro-bind", "/etc/ld.so.cache", "/etc/ld.so.cache"}, {"--ro-bind", "/etc/ssl/certs", "/etc/ssl/certs"}}; !slices.EqualFunc(binds, want, slices.Equal) {
		t.Errorf("binds dropped: %q, want %q", binds, want)
	}
	if !hasSeq(noBinds, "--perms", "0444", "--file", "5", "/etc/services") || !hasSeq(noBinds, "--symlink", "/usr/share/zoneinfo/Etc/UTC", "/etc/localtime") {
		t.Errorf("the copies and links should stay:\n%q", noBinds)
	}
	if _, err := withoutOps(append(slices.Clone(opts), "--overlay-src", "/x"), isProcMask); err == nil {
		t.Error("an option withoutOps does not know was taken")
	}
	if _, err := withoutOps([]string{"--ro-bind", "/usr"}, isProcMask); err == nil {
		t.Error("an option short of its arguments was taken")
	}
}
