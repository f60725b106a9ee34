// Package session supervises sandboxed executions independently of the
// connections that start and watch them.
//
// A Supervisor owns every execution. Clients start one under an ID they
// choose (an idempotency key scoped by owner), attach any number of
// subscriptions that replay the execution's event ring from a sequence
// number and then follow it live, write input by offset so that retries
// are applied once, resize, signal and cancel it, and read its bounded
// final result until retention expires.
//
// Output is always drained into the ring, subscriber or not, so a process
// never blocks on a full pipe and a slow subscriber only ever sees a gap.
// Executions derive their context from the supervisor, never from a
// request: they outlive the connections that started them.
//
// Resizes of one execution are coalesced: within ResizeCoalesce of the
// last size applied, a resize waits and only the last one waiting is
// applied when that time is up, so a burst costs the program, the ring
// and the terminal emulator two sizes, whatever its length. A resize to
// the size applied last adds nothing.
//
// A terminal's screen state behind its ring (screen.go) is bounded: its
// snapshots by MaxSnapshotBytes as JSON text, its emulators' memory by a
// budget per owner and in total, reserved at the most each can hold; an
// ended execution keeps its final snapshot, not its emulator.
//
// An execution with a network policy (Spec.Network; network.go) keeps its
// sandbox's own network: the supervisor has its proxy, transparent and
// DNS listeners opened there before the command runs, and serves them
// through Config.Egress (package sandbox/netpolicy), again after a
// restart. Refusals and changes are notices; SetNetwork changes the
// policy while it runs; an execution whose listeners cannot be served is
// stopped as failed. Ports (ports.go) dials a port a program listens on
// in its sandbox, and lists them, from the host through its network
// namespace.
//
// Execution IDs follow session/execid's grammar. With Config.StateDir an
// execution's state lives in files (session/internal/statedir, whose doc
// lists them), so that a supervisor started on the same directory takes
// over (Restore); new and restored executions are made by one
// constructor.
package session
