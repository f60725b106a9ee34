//go:build linux

package keeper

import (
	"context"
	"errors"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// SpawnRequest describes a child for Client.Spawn.
type SpawnRequest struct {
	Key     string              // unique per keeper, [A-Za-z0-9._-]{1,128}
	Path    string              // the program, an absolute path
	Args    []string            // argv, Args[0] included
	Env     []string            // exactly this environment (empty: none)
	Dir     string              // working directory ("": the keeper's)
	Cred    *syscall.Credential // nil: the keeper's own
	Files   []*os.File          // become the child's descriptors 0..len-1 (the keeper closes its copies after the fork)
	Held    []*os.File          // kept by the keeper, handed back on adoption (PTY master, pipe parent ends, init control)
	Cgroups []string            // cgroup directories the keeper kills and removes when it stops an orphan
	Remove  []string            // paths below the keeper's Dir it removes after that (the execution's state directory)
	Meta    []byte              // opaque, at most MaxMeta bytes, handed back on adoption; replaced by Annotate
}

// Child is a process the keeper had when the client connected.
type Child struct {
	Key    string
	Pid    int
	Meta   []byte
	Held   []*os.File // the caller's copies: it closes them
	Exited bool
	Status unix.WaitStatus // valid when Exited
}

// Client is a gateway's connection to its keeper. Its methods are safe for
// concurrent use.
type Client struct{}

// Dial connects to the keeper serving dir. When none listens, it calls
// start (which should start one, detached) and retries until ctx ends.
// A refused connection returns ErrBusy or ErrVersion at once.
func Dial(ctx context.Context, dir string, start func() error) (*Client, error) {
	return nil, errors.New("keeper: not implemented")
}

// Spawn asks the keeper to start a child and returns its pid. The caller
// keeps its own Files and Held; the keeper holds copies.
func (c *Client) Spawn(ctx context.Context, req SpawnRequest) (pid int, err error) {
	return 0, errors.New("keeper: not implemented")
}

// Annotate replaces the child's Meta.
func (c *Client) Annotate(key string, meta []byte) error {
	return errors.New("keeper: not implemented")
}

// Forget tells the keeper that the exit was collected: it drops the record
// and its held descriptors. Forgetting a running child is refused.
func (c *Client) Forget(key string) error {
	return errors.New("keeper: not implemented")
}

// Children returns what the keeper had when this client connected, in
// spawn order. Each call returns the same descriptors.
func (c *Client) Children() []Child { return nil }

// Exit returns a channel that delivers the child's wait status once it
// was reaped (at once for a child that had already exited), then closes.
// It is closed without a value when the key is unknown or the keeper is lost.
func (c *Client) Exit(key string) <-chan unix.WaitStatus { return nil }

// Lost returns a channel closed when the keeper is gone (the socket
// reached end of file) or the client was detached.
func (c *Client) Lost() <-chan struct{} { return nil }

// Detach closes the connection on purpose: the children live on and the
// keeper's orphan grace starts. It is idempotent.
func (c *Client) Detach() error { return nil }
