//go:build linux && (amd64 || arm64)

package seccomp

import (
	"os"
	"regexp"
	"runtime"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// TestRefusedNames: every name in the tables is the call its number is
// (wantDenied and wantNoSys restate the numbers independently), and
// Refused reports each with the verdict the program gives its number.
func TestRefusedNames(t *testing.T) {
	t.Parallel()
	arch := abis[runtime.GOARCH]
	prog := decodeBPF(t, Program())
	want := map[string]uint32{}
	for name, nr := range wantDenied {
		want[name] = nr
	}
	for name, nr := range wantNoSys {
		want[name] = nr
	}
	tables := append(arch.denied(), noSysCalls...)
	if len(tables) != len(want) {
		t.Errorf("the tables hold %d calls, the restated policy %d", len(tables), len(want))
	}
	numbers := map[string]uint32{}
	for _, c := range tables {
		if nr, ok := want[c.name]; !ok || nr != c.nr {
			t.Errorf("table: %s is %d, want %d (known %v)", c.name, c.nr, nr, ok)
		}
		numbers[c.name] = c.nr
	}
	refused := Refused()
	if len(refused) != len(tables) {
		t.Fatalf("Refused lists %d calls, the tables %d", len(refused), len(tables))
	}
	for _, r := range refused {
		nr, ok := numbers[r.Name]
		if !ok {
			t.Errorf("Refused names %s, which no table holds", r.Name)
			continue
		}
		got, err := runBPF(prog, callInput{nr: nr, arch: arch.audit}.encode())
		if err != nil {
			t.Fatal(err)
		}
		if want := errnoVerdict(r.Errno); got != want {
			t.Errorf("%s (%d): the program says %s, Refused %s", r.Name, nr, verdictName(got), unix.ErrnoName(r.Errno))
		}
	}
}

// wantNoSys restates the calls refused with ENOSYS.
var wantNoSys = map[string]uint32{
	"clone3": unix.SYS_CLONE3, "io_uring_setup": unix.SYS_IO_URING_SETUP,
	"io_uring_enter": unix.SYS_IO_URING_ENTER, "io_uring_register": unix.SYS_IO_URING_REGISTER,
}

// TestNamesMatchKernelHeader checks the tables' names and numbers
// against a third source, the kernel's own header, where it is
// installed (linux-libc-dev): x/sys and the tables could share a
// mistake. A name newer than the header is logged, not failed.
func TestNamesMatchKernelHeader(t *testing.T) {
	t.Parallel()
	header := map[string]string{"amd64": "/usr/include/x86_64-linux-gnu/asm/unistd_64.h", "arm64": "/usr/include/asm-generic/unistd.h"}[runtime.GOARCH]
	data, err := os.ReadFile(header)
	if err != nil {
		t.Skipf("no kernel header to check against: %v", err)
	}
	defined := map[string]uint32{}
	for _, m := range regexp.MustCompile(`(?m)^#define __NR_(\w+)\s+(\d+)\s*$`).FindAllSubmatch(data, -1) {
		nr, _ := strconv.ParseUint(string(m[2]), 10, 32)
		defined[string(m[1])] = uint32(nr)
	}
	if len(defined) < 200 {
		t.Fatalf("%s: %d definitions parsed: not the header expected", header, len(defined))
	}
	for _, c := range append(abis[runtime.GOARCH].denied(), noSysCalls...) {
		nr, ok := defined[c.name]
		switch {
		case !ok:
			t.Logf("%s: newer than %s", c.name, header)
		case nr != c.nr:
			t.Errorf("%s: the table says %d, %s %d", c.name, c.nr, header, nr)
		}
	}
}
