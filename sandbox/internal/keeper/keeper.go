//go:build linux

package keeper

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// Defaults for the zero values of Config.
const (
	DefaultOrphanGrace = 10 * time.Minute
	DefaultKillGrace   = 2 * time.Second
	// Linger is how long a keeper with neither children nor a gateway
	// waits before it exits.
	Linger = 5 * time.Second
)

// Errors returned by Serve, Dial and the Client's methods.
var (
	// ErrBusy: another gateway is attached; the message names its pid.
	ErrBusy = errors.New("keeper: another gateway is attached")
	// ErrVersion: the two sides share no protocol version.
	ErrVersion = errors.New("keeper: unsupported protocol version")
	// ErrRunning: another keeper already serves the directory.
	ErrRunning = errors.New("keeper: another keeper serves this directory")
	// ErrDir: the state directory is not ours or not mode 0700.
	ErrDir = errors.New("keeper: unsafe state directory")
	// ErrInvalid: a request or message was refused as malformed.
	ErrInvalid = errors.New("keeper: invalid request")
	// ErrExists: a child with that key is already known.
	ErrExists = errors.New("keeper: key in use")
	// ErrUnknown: no child with that key.
	ErrUnknown = errors.New("keeper: no such child")
	// ErrLost: the keeper is gone (the socket reached end of file).
	ErrLost = errors.New("keeper: lost the keeper")
)

// Config configures Serve.
type Config struct {
	Dir         string        // state directory: socket Dir/keeper.sock; 0700, owned by us
	OrphanGrace time.Duration // no gateway attached this long: stop every child (default 10m)
	KillGrace   time.Duration // SIGTERM to SIGKILL when stopping orphans (default 2s)
	Logger      *slog.Logger  // nil: discard
}

// Serve is the keeper process's main loop. It returns nil once the orphan
// grace stopped every child, or once it had neither children nor a
// gateway for Linger; it returns an error when it cannot serve Dir (ErrDir,
// ErrRunning). When ctx ends it stops every child as the orphan grace
// would and returns ctx's error. Serve must be called at most once per
// process: its forking thread lives as long as the process.
func Serve(ctx context.Context, cfg Config) error {
	return errors.New("keeper: not implemented")
}
