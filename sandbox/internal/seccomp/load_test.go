//go:build linux && (amd64 || arm64)

package seccomp

import (
	"runtime"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// numbersChecked are the system call numbers TestEveryNumber and
// TestNumberPathIsShort try: every number either ABI has today, with
// room above, then the x32 range and the number a tracer skips with.
func numbersChecked() []uint32 {
	var nrs []uint32
	for nr := range uint32(1024) {
		nrs = append(nrs, nr)
	}
	return append(nrs, x32SyscallBit, x32SyscallBit|39, x32SyscallBit|250, 0xfffffffe, skippedNr)
}

// wantForNumber restates the policy for a call whose arguments are all
// zero, independently of the filter's own tables.
func wantForNumber(nr uint32) uint32 {
	if runtime.GOARCH == "amd64" && nr != skippedNr && nr >= x32SyscallBit {
		return errnoVerdict(unix.ENOSYS)
	}
	for _, denied := range wantDenied {
		if nr == denied {
			return errnoVerdict(unix.EPERM)
		}
	}
	switch nr {
	case unix.SYS_CLONE3, unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER:
		return errnoVerdict(unix.ENOSYS)
	case unix.SYS_SOCKET, unix.SYS_SOCKETPAIR: // family 0 is AF_UNSPEC
		return errnoVerdict(unix.EAFNOSUPPORT)
	}
	return unix.SECCOMP_RET_ALLOW
}

// TestEveryNumber runs the filter on every number with zero arguments:
// the search that routes a number to its rule must lose none and invent
// none.
func TestEveryNumber(t *testing.T) {
	t.Parallel()
	prog := decodeBPF(t, Program())
	native := abis[runtime.GOARCH].audit
	for _, nr := range numbersChecked() {
		got, err := runBPF(prog, callInput{nr: nr, arch: native}.encode())
		if err != nil {
			t.Fatalf("nr %#x: %v", nr, err)
		}
		if want := wantForNumber(nr); got != want {
			t.Errorf("nr %#x: verdict %s, want %s", nr, verdictName(got), verdictName(want))
		}
	}
}

// maxNumberPath bounds the instructions any system call number runs
// before its verdict or the first load of an argument. The kernel walks
// that path for every number of the native ABI each time it installs the
// filter, to cache the calls it always allows (seccomp_cache_prepare),
// and bwrap installs it twice per sandbox; calls it cannot cache walk it
// again each time they are made. A chain of one comparison per rule ran
// up to 44 instructions and cost about 85 µs per install on the
// development machine, the search 13 and 45 µs (BenchmarkLoad).
const maxNumberPath = 16

func TestNumberPathIsShort(t *testing.T) {
	t.Parallel()
	prog := decodeBPF(t, Program())
	native := abis[runtime.GOARCH].audit
	longest, at := 0, uint32(0)
	for _, nr := range numbersChecked() {
		_, steps, err := traceBPF(prog, callInput{nr: nr, arch: native}.encode())
		if err != nil {
			t.Fatalf("nr %#x: %v", nr, err)
		}
		if steps > longest {
			longest, at = steps, nr
		}
	}
	t.Logf("longest path: %d instructions, for nr %#x, in a %d-instruction program", longest, at, len(prog))
	if longest > maxNumberPath {
		t.Errorf("nr %#x runs %d instructions before its verdict, want at most %d", at, longest, maxNumberPath)
	}
}

// BenchmarkLoad measures what installing the filter costs the kernel
// (checking, compiling and caching it). Loads run on threads of their own
// that exit after loadsPerThread of them, so the benchmark's other threads
// stay unfiltered and no thread's stack of filters nears the kernel's
// bound on their total length.
func BenchmarkLoad(b *testing.B) {
	prog := decodeBPF(b, Program())
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	const loadsPerThread = 64
	for n := 0; n < b.N; n += loadsPerThread {
		errc := make(chan error, 1)
		go func() { // never unlocks: its thread exits with it, filters and all
			runtime.LockOSThread()
			errc <- loadOnThisThread(&fprog, min(loadsPerThread, b.N-n))
		}()
		if err := <-errc; err != nil {
			b.Fatal(err)
		}
	}
	runtime.KeepAlive(prog)
	b.ReportMetric(float64(len(prog)), "instructions")
}

// loadOnThisThread installs fprog n times on the calling thread alone.
func loadOnThisThread(fprog *unix.SockFprog, n int) error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return err
	}
	for range n {
		_, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(fprog)))
		if errno != 0 {
			return errno
		}
	}
	return nil
}
