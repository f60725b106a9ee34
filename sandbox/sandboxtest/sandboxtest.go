// Package sandboxtest holds what tests of the sandbox and of the packages
// above it share: the rule that a test which cannot find what it needs
// skips with a clear message locally and fails when CI=true, a value built
// once per test binary (a launcher), directories the sandbox identity can
// reach, a buffer safe for output copiers, a scan of host processes,
// Eventually, the one polling loop for conditions that come true at some
// point, Main, the TestMain that checks no goroutine outlived the tests,
// and Race, true in a binary built with -race, for heavy tests that shrink
// their workload there: a deadline in a test is a safety net sized for
// -race on two busy cores, not a measure.
//
// It is for tests only and imports nothing of termgate's, so the sandbox
// package's own tests can use it too.
package sandboxtest

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// InCI reports whether a missing prerequisite must fail the test: a
// silently skipped sandbox test is worse than a red one.
func InCI() bool { return os.Getenv("CI") == "true" }

// Unavailable skips t because what is missing, or fails it under CI.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if InCI() {
		t.Fatalf("CI=true: "+format, args...)
	}
	t.Skipf(format, args...)
}

// NeedSysMounted is for tests of lean mount namespaces, which leave /sys
// out: they need root, and a host with /sys mounted to tell.
func NeedSysMounted(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Unavailable(t, "a mount namespace needs root")
	}
	host, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(host), " /sys ") {
		t.Skip("the host has no /sys mounted")
	}
}

// Need calls Unavailable when err, what failed to provide, is not nil.
func Need(t testing.TB, what string, err error) {
	t.Helper()
	if err != nil {
		Unavailable(t, "%s unavailable: %v", what, err)
	}
}

// NeedRoot skips a test of root-only guarantees, failing under CI.
func NeedRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Unavailable(t, "needs root")
	}
}

// Shared is a value built once per test binary, on first use, and handed
// to every test that asks; a build error skips (or, under CI, fails) each
// of them. Its zero value is not usable: set New.
type Shared[T any] struct {
	What  string            // what T is, for the skip message ("sandbox (install bubblewrap)")
	New   func() (T, error) // builds the value
	Close func(T)           // releases it, from Release; may be nil

	once  sync.Once
	built bool
	v     T
	err   error
}

// Get returns the shared value, building it on the first call.
func (s *Shared[T]) Get(t testing.TB) T {
	t.Helper()
	s.once.Do(func() {
		s.v, s.err = s.New()
		s.built = s.err == nil
	})
	Need(t, s.What, s.err)
	return s.v
}

// Release closes the value if a test built it; call it from TestMain
// after m.Run.
func (s *Shared[T]) Release() {
	if s.built && s.Close != nil {
		s.Close(s.v)
	}
}

// Dir returns a fresh directory the sandbox identity can reach:
// t.TempDir's parent is private to root.
func Dir(t testing.TB) string {
	t.Helper()
	d := t.TempDir()
	if err := os.Chmod(filepath.Dir(d), 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// SyncBuffer is a bytes.Buffer safe for concurrent writers (output
// copiers, a logger's goroutines) and a reading test.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Len returns the number of bytes written so far.
func (s *SyncBuffer) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Len()
}

// ProcessesWithArg lists the pids of host processes whose command line
// contains arg but no "-c": the shell that started them is not counted.
// Tests use it to find processes that outlived their execution.
func ProcessesWithArg(arg string) []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(b), arg) && !strings.Contains(string(b), "-c") {
			out = append(out, e.Name())
		}
	}
	return out
}
