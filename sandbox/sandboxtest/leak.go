package sandboxtest

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// Forker is the goroutine of a forking thread kept for good (package
// sandbox/internal/forker): a launcher's once it forked a sandbox from a
// lean mount namespace, one that could not leave a cgroup. It holds the
// locked thread every child it forked dies with. A leak check of a
// package whose tests start sandboxes passes it to goleak.Find.
var Forker = goleak.IgnoreTopFunction("github.com/termgate/termgate/sandbox/internal/forker.(*Forker).loop")

// MainOption adjusts Main.
type MainOption func(*mainOptions)

type mainOptions struct {
	after  []func()
	ignore []goleak.Option
}

// After has Main call f once the tests ran, before the leak check: a
// shared value's Release, whose goroutines would otherwise count.
func After(f func()) MainOption {
	return func(o *mainOptions) { o.after = append(o.after, f) }
}

// Ignore passes opts to the leak check: goroutines the package keeps on
// purpose, such as Forker.
func Ignore(opts ...goleak.Option) MainOption {
	return func(o *mainOptions) { o.ignore = append(o.ignore, opts...) }
}

// Main is a TestMain's body: it runs the tests, then each After, then,
// when the tests passed, fails the binary if a goroutine outlived them
// (goleak.Find), and exits. Roles a test binary plays for its own tests
// (a keeper, a helper process) go before it.
func Main(m *testing.M, opts ...MainOption) {
	var o mainOptions
	for _, opt := range opts {
		opt(&o)
	}
	code := m.Run()
	for _, f := range o.after {
		f()
	}
	if code == 0 {
		if err := goleak.Find(o.ignore...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
