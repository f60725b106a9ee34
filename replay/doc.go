// Package replay holds the bounded, sequence-numbered event log of one
// execution, so that any number of readers can replay what happened and
// then follow it live, and a reader that reconnects resumes exactly where
// it left off.
//
// A Ring records Events: the process started, output on a stream, a
// resize, stdin closed, a signal sent, and finally the exit. Append numbers
// them 1, 2, 3, ... with no gaps and gives every output event the byte
// Offset of its first byte within its stream, so a reader can check that
// it has seen every byte exactly once. The exit event is always the last:
// after it the ring is closed and Append fails with ErrClosed.
//
// The ring is bounded by bytes of output and by number of events (never by
// lines: a program may print megabytes without a newline). Append evicts
// the oldest events to stay within both bounds and never waits for
// readers: a slow reader does not slow the process, it falls behind and is
// told so by a Gap naming the sequences and output bytes it missed.
//
// Readers either call Read with the last sequence they have, or keep a
// Cursor, which waits for new events (Wait), returns them in batches, and
// reports gaps and the end (io.EOF after the exit event). Every blocking
// call takes a context.
//
// The ring is a pure data structure: no I/O and no goroutines of its own.
// All methods of Ring are safe for concurrent use; a Cursor belongs to one
// reader.
//
// A backed ring (Config.Memory) keeps its events in memory the caller
// provides, usually a MAP_SHARED mapping of a file on tmpfs, written so
// that Recover rebuilds the ring exactly after the writer was killed at
// any instruction (backed.go describes the layout and publish order).
// Reserve and Commit let a reader read straight into that memory, so a
// byte the kernel handed over is in the ring even if the writer dies
// before it commits. Word keeps a few words of the caller's state there.
// Its limits: output events of at most MaxReserve bytes (longer output is
// split), exit and notice text of at most MaxPayload, MemorySize(cfg) of
// memory (sparse: an idle ring touches a page, a busy one about what it
// retains plus 128 KiB), and Data that readers get is a copy (Read: theirs
// to keep; Cursor.Next: reused by the cursor's next call).
//
// Output is copied once, into slabs of memory that the ring reuses, so a
// busy ring allocates nothing. The Data of a returned event is shared with
// the ring and other readers and must never be modified. Data returned by
// Cursor.Next is lent: it stays valid until that cursor's next call to
// Next, and a reader that needs it longer copies it. Data returned by Read
// stays valid for as long as the caller keeps it.
package replay
