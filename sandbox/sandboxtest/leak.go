package sandboxtest

import "go.uber.org/goleak"

// Forker is the goroutine a launcher keeps for good once it forked a
// sandbox from a lean mount namespace: it holds the locked thread every
// bwrap it forked dies with. A leak check of a package whose tests start
// sandboxes passes it to goleak.Find.
var Forker = goleak.IgnoreTopFunction("github.com/termgate/termgate/sandbox.(*v1Forker).loop")
