package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// maxInitBytes bounds what each of termgate's packages allocates in its
// initialisers. Every client command (run, attach, cp, completion) pays
// them before main: server-only state is made when first used
// (sync.OnceValue), never at init. A regular expression compiled at init
// costs 5-300 KiB here.
const maxInitBytes = 16 << 10

// TestInitIsSmall runs this test binary, which links every package the
// termgate binary does, with the runtime's init trace, and holds each of
// termgate's packages to maxInitBytes.
func TestInitIsSmall(t *testing.T) {
	t.Parallel()
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %s", err, stderr.Bytes())
	}
	seen := 0
	for sc := bufio.NewScanner(bytes.NewReader(stderr.Bytes())); sc.Scan(); {
		// init PKG @T ms, C ms clock, B bytes, N allocs
		f := strings.Fields(sc.Text())
		if len(f) < 11 || f[0] != "init" || f[8] != "bytes," {
			continue
		}
		if !strings.HasPrefix(f[1], "github.com/termgate/termgate/") {
			continue
		}
		seen++
		if b, err := strconv.Atoi(f[7]); err != nil || b > maxInitBytes {
			t.Errorf("%s allocates %s bytes in its initialisers, want at most %d: make it when first used", f[1], f[7], maxInitBytes)
		}
	}
	if seen < 10 {
		t.Fatalf("the init trace named %d of termgate's packages: %q", seen, stderr.Bytes())
	}
}

// BenchmarkCLIStart: the termgate binary's own start, as every client
// command pays it: `termgate --version`, its wall time and CPU per run,
// beside a Go program that only prints (the Go runtime's own start, the
// floor for any Go binary) and /usr/bin/true, on the same machine in the
// same run: medians. Both Go binaries are linked as make build links
// termgate (statically).
func BenchmarkCLIStart(b *testing.B) {
	dir := b.TempDir()
	bin, hello := filepath.Join(dir, "termgate"), filepath.Join(dir, "hello")
	src := filepath.Join(dir, "hello.go")
	if err := os.WriteFile(src, []byte("package main\n\nimport \"os\"\n\nfunc main() { os.Stdout.WriteString(\"hello\\n\") }\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	for _, c := range [][]string{{"-o", bin, "."}, {"-o", hello, src}} {
		build := exec.Command("go", append([]string{"build", "-tags", "netgo,osusergo", "-ldflags", "-linkmode=external -extldflags=-static"}, c...)...)
		if out, err := build.CombinedOutput(); err != nil {
			b.Fatalf("go build: %v %s", err, out)
		}
	}
	measure := func(name string, args ...string) (wall, cpu time.Duration) {
		cmd := exec.Command(name, args...)
		start := time.Now()
		if err := cmd.Run(); err != nil {
			b.Fatalf("%s: %v", name, err)
		}
		wall = time.Since(start)
		u := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		return wall, time.Duration(u.Utime.Nano() + u.Stime.Nano())
	}
	measure(bin, "--version") // the binary in the page cache
	var wall, cpu, helloWall, helloCPU, trueWall, trueCPU []time.Duration
	for b.Loop() {
		w, c := measure(bin, "--version")
		wall, cpu = append(wall, w), append(cpu, c)
		w, c = measure(hello)
		helloWall, helloCPU = append(helloWall, w), append(helloCPU, c)
		w, c = measure("/usr/bin/true")
		trueWall, trueCPU = append(trueWall, w), append(trueCPU, c)
	}
	p50 := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2]) / 1e6
	}
	b.ReportMetric(p50(wall), "p50-wall-ms")
	b.ReportMetric(p50(cpu), "p50-cpu-ms")
	b.ReportMetric(p50(helloWall), "go-hello-p50-wall-ms")
	b.ReportMetric(p50(helloCPU), "go-hello-p50-cpu-ms")
	b.ReportMetric(p50(trueWall), "true-p50-wall-ms")
	b.ReportMetric(p50(trueCPU), "true-p50-cpu-ms")
}
