package sandboxtest

import "go.uber.org/goleak"

// Forker is the goroutine of a forking thread kept for good (package
// sandbox/internal/forker): a launcher's once it forked a sandbox from a
// lean mount namespace, one that could not leave a cgroup. It holds the
// locked thread every child it forked dies with. A leak check of a
// package whose tests start sandboxes passes it to goleak.Find.
var Forker = goleak.IgnoreTopFunction("github.com/termgate/termgate/sandbox/internal/forker.(*Forker).loop")
