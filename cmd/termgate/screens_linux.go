package main

import (
	"cmp"
	"fmt"

	"github.com/termgate/termgate/gateway"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/session"
)

// screenOptions are serve's bounds on terminals' screen state and the
// snapshots that carry it: a snapshot never takes a larger message than
// --max-message-bytes, and emulators' memory is budgeted.
type screenOptions struct {
	maxSnapshot int64 // --max-snapshot-bytes; 0: --max-message-bytes
	memory      int64 // --screen-memory
	perTenant   int64 // --screen-memory-per-tenant
}

// minSnapshotBytes is the smallest --max-snapshot-bytes: a 250x80
// terminal's screen in colour, with room for a little scrollback.
const minSnapshotBytes = 64 << 10

func (o *screenOptions) register(e *envFlags, server *gateway.Config) {
	o.memory, o.perTenant = session.DefaultMaxScreenMemory, session.DefaultMaxScreenMemoryPerOwner
	e.parsed("max-snapshot-bytes", "largest screen snapshot message, at least 64K and at most --max-message-bytes; a longer scrollback is cut to its newest lines, a larger screen gets a gap (default: --max-message-bytes)", sizeFlag(&o.maxSnapshot))
	e.parsed("screen-memory", "memory all terminals' screen state (their emulators) may hold, each counted at the most it can hold at its size (two 1000x1000 buffers: 48 MB); a terminal beyond it gets gaps instead of snapshots, and the log says why (default 512M)", sizeFlag(&o.memory))
	e.parsed("screen-memory-per-tenant", "the same for all of one tenant's terminals (default 32M)", sizeFlag(&o.perTenant))
	e.parsed("max-queued-bytes", "bytes of messages waiting for one connection's writer; a snapshot beyond it is sent as a gap (default 8M)", sizeFlag(&server.MaxQueuedBytes))
	e.parsed("max-queued-bytes-per-subject", "the same for all of a token subject's connections (default 16M)", sizeFlag(&server.MaxQueuedBytesPerSubject))
}

func (o *screenOptions) check(maxMessage int64) error {
	maxMessage = cmp.Or(maxMessage, gateway.DefaultMaxMessageBytes)
	switch {
	case o.maxSnapshot != 0 && (o.maxSnapshot < minSnapshotBytes || o.maxSnapshot > maxMessage):
		return fmt.Errorf("serve: --max-snapshot-bytes %d: want 64K to --max-message-bytes (%d)", o.maxSnapshot, maxMessage)
	case o.memory <= 0 || o.perTenant <= 0:
		return fmt.Errorf("serve: --screen-memory and --screen-memory-per-tenant must be positive")
	}
	return nil
}

// snapshotBytes is the largest snapshot message.
func (o *screenOptions) snapshotBytes(maxMessage int64) int64 {
	return cmp.Or(o.maxSnapshot, maxMessage, gateway.DefaultMaxMessageBytes)
}

// wire hands the bounds to the supervisor: a snapshot's data, as JSON
// text, gets what the message leaves beside its other fields.
func (o *screenOptions) wire(cfg *session.Config, maxMessage int64) {
	cfg.MaxSnapshotBytes = int(o.snapshotBytes(maxMessage)) - wire.SnapshotOverhead
	cfg.MaxScreenMemory, cfg.MaxScreenMemoryPerOwner = int(o.memory), int(o.perTenant)
}
