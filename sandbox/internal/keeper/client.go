//go:build linux

package keeper

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Dial's pacing while no keeper listens yet.
const (
	dialBackoffMax = 200 * time.Millisecond
	restartEvery   = 2 * time.Second // start is called again at most this often
	handshakeMax   = 10 * time.Second
)

// SpawnRequest describes a child for Client.Spawn.
type SpawnRequest struct {
	Key     string              // unique per keeper, [A-Za-z0-9._-]{1,128}
	Path    string              // the program, an absolute path
	Args    []string            // argv, Args[0] included (empty: Path alone)
	Env     []string            // exactly this environment (empty: none)
	Dir     string              // working directory ("": the keeper's)
	Cred    *syscall.Credential // nil: the keeper's own
	Files   []*os.File          // become the child's descriptors 0..len-1, in blocking mode, which the caller's copies share (the keeper closes its copies after the fork)
	Held    []*os.File          // kept by the keeper, handed back on adoption (PTY master, pipe parent ends, init control); the caller's stay as they are
	Cgroups []string            // cgroup directories (below /sys/fs/cgroup) the keeper kills and removes when it stops an orphan
	// Into, one of Cgroups, is a cgroup2 directory to fork the child
	// straight into (clone3's CLONE_INTO_CGROUP), so that it needs no
	// move there, which waits for the kernel's global cgroup lock. A
	// keeper that cannot (a kernel without it) forks the child where it
	// is itself: Spawned.Placed is then false, and the caller moves the
	// child.
	Into string
	// Enter, of Cgroups but Into, are cgroup v1 directories for the
	// child to be born in: the keeper's forking thread enters them
	// alone before the fork (no global lock) and leaves after it. Those
	// it could not enter are missing from Spawned.Entered, and the
	// caller moves the child.
	Enter  []string
	Remove []string // paths below the keeper's Dir it removes after that (the execution's state directory)
	// Supervised says the child and its own children supervise what
	// runs below them (bwrap and its pid 1): stopping an orphan sends
	// SIGTERM past them, to the processes they run, so that those end as
	// on a cancel; SIGKILL then reaches everything.
	Supervised bool
	Meta       []byte // opaque, at most MaxMeta bytes, handed back on adoption; replaced by Annotate
	// Resolves are the host paths the child resolves by name (bwrap's
	// binds, its program). With them the keeper forks the child from a
	// fresh copy of its mount namespace that keeps only the mounts on
	// the way to them and below them (package mountns), whose shorter
	// table bwrap reads back faster; Spawned.Lean says it did. Without
	// them, or from a keeper without CAP_SYS_ADMIN, the child is forked
	// from the keeper's own namespace.
	Resolves []string
	// NetNS, when set, is a network namespace (an nsfs descriptor) for
	// the child to be born in: the keeper's forking thread enters it
	// alone for the fork, and returns.
	NetNS *os.File
}

// Child is a process the keeper had when the client connected.
type Child struct {
	Key    string
	Pid    int
	Meta   []byte
	Held   []*os.File // received copies, owned by the caller
	Exited bool
	Status unix.WaitStatus // valid when Exited
}

// Client is a gateway's connection to its keeper. Its methods are safe for
// concurrent use.
type Client struct {
	c         *endpoint
	keeperPid int
	children  []Child
	readDone  chan struct{}
	lost      chan struct{}
	detach    sync.Once

	mu      sync.Mutex
	seq     uint64
	pending map[uint64]chan message
	exits   map[string]*exitState
	gone    bool // lost: no more replies or exits
}

// exitState is what the client knows of one key's exit.
type exitState struct {
	done   bool
	status unix.WaitStatus
	calls  []*exitCall
}

// exitCall is one OnExit: it runs once, on a goroutine of its own,
// unless cancelled first.
type exitCall struct {
	fn    func(ws unix.WaitStatus, ok bool)
	taken atomic.Bool
}

func (e *exitCall) run(ws unix.WaitStatus, ok bool) {
	if e.taken.CompareAndSwap(false, true) {
		go e.fn(ws, ok)
	}
}

// Dial connects to the keeper serving dir. When none listens, it calls
// start (which should start one, detached; nil: do not start one) and
// retries until ctx ends, calling start again at most every 2s. A keeper
// that refuses the connection makes Dial return ErrBusy or ErrVersion at once.
func Dial(ctx context.Context, dir string, start func() error) (*Client, error) {
	// Before anything is dialled or started: a keeper's socket and its
	// log belong in a directory nobody else controls.
	if _, err := checkDir(dir); err != nil {
		return nil, err
	}
	sock := filepath.Join(dir, SocketName)
	var started time.Time
	backoff := 5 * time.Millisecond
	for {
		c, err := dialOnce(ctx, sock)
		if err == nil || !retryable(err) {
			return c, err
		}
		if start == nil {
			return nil, fmt.Errorf("keeper: dial %s: %w", sock, err)
		}
		if started.IsZero() || time.Since(started) >= restartEvery {
			started = time.Now()
			if serr := start(); serr != nil {
				return nil, fmt.Errorf("keeper: start a keeper for %s: %w", dir, serr)
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("keeper: dial %s: %w (last: %w)", sock, ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, dialBackoffMax)
	}
}

// retryable reports whether no keeper serves the socket (yet): none
// listens, the one there is exiting, or it dropped the connection
// (too many handshakes at once).
func retryable(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ECONNREFUSED) ||
		errors.Is(err, unix.ECONNRESET) || errors.Is(err, unix.EPIPE) ||
		errors.Is(err, errExiting) || errors.Is(err, errClosed)
}

// dialOnce connects, checks that the keeper runs as our uid, says hello
// and reads the listing of children.
func dialOnce(ctx context.Context, sock string) (*Client, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unixpacket", sock)
	if err != nil {
		return nil, err
	}
	uc := nc.(*net.UnixConn)
	uc.SetWriteBuffer(2 * MaxMessage)
	c := &Client{c: &endpoint{c: uc}, readDone: make(chan struct{}), lost: make(chan struct{}),
		pending: map[uint64]chan message{}, exits: map[string]*exitState{}}
	if err := c.handshake(ctx); err != nil {
		closeAll(c.held())
		uc.Close()
		return nil, err
	}
	go c.read()
	return c, nil
}

func (c *Client) handshake(ctx context.Context) error {
	cred, err := peerCred(c.c.c)
	if err != nil {
		return err
	}
	if int(cred.Uid) != os.Geteuid() {
		return fmt.Errorf("%w: keeper pid %d runs as uid %d, not %d", ErrInvalid, cred.Pid, cred.Uid, os.Geteuid())
	}
	deadline, ok := ctx.Deadline()
	if !ok || time.Until(deadline) > handshakeMax {
		deadline = time.Now().Add(handshakeMax)
	}
	c.c.c.SetReadDeadline(deadline)
	defer c.c.c.SetReadDeadline(time.Time{})
	if err := c.c.send(message{Op: opHello, Version: Version, MinVersion: Version, Pid: os.Getpid()}); err != nil {
		return err
	}
	m, files, err := c.c.recv()
	closeFds(files)
	switch {
	case err != nil:
		return err
	case m.Op == opRefuse:
		if err := m.refusal(); err != nil {
			return err
		}
		return fmt.Errorf("%w: refused", ErrInvalid)
	case m.Op != opWelcome:
		return fmt.Errorf("%w: keeper answered hello with %q", ErrInvalid, m.Op)
	case m.Version != Version:
		return fmt.Errorf("%w: the keeper welcomed protocol %d, this gateway speaks %d", ErrVersion, m.Version, Version)
	}
	c.keeperPid = m.Pid
	return c.readListing()
}

// readListing takes the child messages up to ready.
func (c *Client) readListing() error {
	for range MaxChildren + 1 {
		m, files, err := c.c.recv()
		if err != nil {
			return err
		}
		switch m.Op {
		case opReady:
			return nil
		case opChild:
			c.children = append(c.children, Child{Key: m.Key, Pid: m.Pid, Meta: m.Meta, Held: heldFiles(m.Key, files),
				Exited: m.Exited, Status: unix.WaitStatus(m.Status)})
			st := &exitState{done: m.Exited, status: unix.WaitStatus(m.Status)}
			c.exits[m.Key] = st
		case opExit:
			closeFds(files)
			c.recordExit(m.Key, unix.WaitStatus(m.Status))
		default:
			closeFds(files) // a newer keeper's message
		}
	}
	return fmt.Errorf("%w: listing of more than %d children", ErrInvalid, MaxChildren)
}

// heldFiles wraps received descriptors; a non-blocking one (a PTY master
// opened for the poller) becomes pollable again.
func heldFiles(key string, fds []int) []*os.File {
	files := make([]*os.File, len(fds))
	for i, fd := range fds {
		files[i] = os.NewFile(uintptr(fd), fmt.Sprintf("keeper-%s-%d", key, i))
	}
	return files
}

func (c *Client) held() []*os.File {
	var files []*os.File
	for _, ch := range c.children {
		files = append(files, ch.Held...)
	}
	return files
}

// read dispatches replies and exits until the connection ends.
func (c *Client) read() {
	defer close(c.readDone)
	for {
		m, files, err := c.c.recv()
		if errors.Is(err, ErrInvalid) {
			continue // a keeper bug; the request it answered gets ErrLost at the end
		}
		if err != nil {
			break
		}
		closeFds(files)
		switch m.Op {
		case opReply:
			c.mu.Lock()
			if ch := c.pending[m.Seq]; ch != nil {
				delete(c.pending, m.Seq)
				ch <- m
			}
			c.mu.Unlock()
		case opExit:
			c.recordExit(m.Key, unix.WaitStatus(m.Status))
		}
	}
	c.mu.Lock()
	c.gone = true
	for seq, ch := range c.pending {
		close(ch)
		delete(c.pending, seq)
	}
	for _, st := range c.exits {
		if !st.done {
			for _, e := range st.calls {
				e.run(0, false)
			}
			st.calls = nil
		}
	}
	c.mu.Unlock()
	close(c.lost)
}

// recordExit keeps the first status reported for key and hands it to
// the calls waiting for it (OnExit).
func (c *Client) recordExit(key string, ws unix.WaitStatus) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.exits[key]
	if st == nil {
		st = &exitState{}
		c.exits[key] = st
	}
	if st.done {
		return
	}
	st.done, st.status = true, ws
	for _, e := range st.calls {
		e.run(ws, true)
	}
	st.calls = nil
}

// request sends m and waits for its reply.
func (c *Client) request(ctx context.Context, m message, fds []int) (message, error) {
	reply := make(chan message, 1)
	c.mu.Lock()
	if c.gone {
		c.mu.Unlock()
		return message{}, ErrLost
	}
	c.seq++
	m.Seq = c.seq
	c.pending[m.Seq] = reply
	c.mu.Unlock()
	err := c.c.send(m, fds...)
	if err != nil {
		c.abandon(m.Seq)
		return message{}, err
	}
	select {
	case r, ok := <-reply:
		if !ok {
			return message{}, ErrLost
		}
		return r, r.refusal()
	case <-ctx.Done():
		c.abandon(m.Seq)
		return message{}, ctx.Err()
	}
}

func (c *Client) abandon(seq uint64) {
	c.mu.Lock()
	delete(c.pending, seq)
	c.mu.Unlock()
}

// Spawned is a child the keeper started.
type Spawned struct {
	Pid int
	// Placed says the child was forked into SpawnRequest.Into.
	Placed bool
	// Entered are the directories of SpawnRequest.Enter it was born in.
	Entered []string
	// Lean says the child was forked from a lean mount namespace.
	Lean bool
}

// Spawn asks the keeper to start a child. The caller
// keeps its own Files and Held; the keeper works on copies. When ctx ends
// before the keeper answered, the child may still have started: it is in
// the next connection's Children.
func (c *Client) Spawn(ctx context.Context, req SpawnRequest) (Spawned, error) {
	m := message{Op: opSpawn, Key: req.Key, Path: req.Path, Args: req.Args, Env: req.Env, Dir: req.Dir,
		Files: len(req.Files), Held: len(req.Held), Cgroups: req.Cgroups, Into: req.Into, Enter: req.Enter, Remove: req.Remove,
		Supervised: req.Supervised, Meta: req.Meta, Resolves: req.Resolves, ArgsFile: true}
	if req.Cred != nil {
		m.Cred = &credential{Uid: req.Cred.Uid, Gid: req.Cred.Gid, Groups: req.Cred.Groups, NoSetGroups: req.Cred.NoSetGroups}
	}
	if err := m.check(); err != nil {
		return Spawned{}, err
	}
	af, err := argsFile(m.Args, m.Env)
	if err != nil {
		return Spawned{}, err
	}
	defer af.Close()
	files := append(append([]*os.File{}, req.Files...), req.Held...)
	if req.NetNS != nil {
		m.NetNS = true
		files = append(files, req.NetNS)
	}
	files = append(files, af)
	m.Argc = len(m.Args)
	fds, err := rawFds(files)
	if err != nil {
		return Spawned{}, err
	}
	r, err := c.request(ctx, m, fds)
	runtime.KeepAlive(files)
	if err != nil {
		return Spawned{}, err
	}
	c.mu.Lock()
	if c.exits[req.Key] == nil {
		c.exits[req.Key] = &exitState{}
	}
	c.mu.Unlock()
	var entered []string
	for _, dir := range r.Entered {
		if slices.Contains(m.Enter, dir) {
			entered = append(entered, dir)
		}
	}
	return Spawned{Pid: r.Pid, Placed: r.Placed && m.Into != "", Entered: entered, Lean: r.Lean && len(m.Resolves) > 0}, nil
}

// Annotate replaces the child's Meta.
func (c *Client) Annotate(key string, meta []byte) error {
	m := message{Op: opAnnotate, Key: key, Meta: meta}
	if err := m.check(); err != nil {
		return err
	}
	_, err := c.request(context.Background(), m, nil)
	return err
}

// Forget tells the keeper that the exit was collected: it drops the record
// and its held descriptors. Forgetting a running child is refused
// (ErrStillRunning).
func (c *Client) Forget(key string) error {
	m := message{Op: opForget, Key: key}
	if err := m.check(); err != nil {
		return err
	}
	_, err := c.request(context.Background(), m, nil)
	if err == nil {
		c.mu.Lock()
		delete(c.exits, key)
		c.mu.Unlock()
	}
	return err
}

// Children returns what the keeper had when this client connected, in
// spawn order. The descriptors in Held belong to the caller; every call
// returns the same ones.
func (c *Client) Children() []Child { return append([]Child(nil), c.children...) }

// Exit returns a channel that delivers the child's wait status once it
// was reaped (at once for a child that had already exited), then closes.
// It is closed without a value when the key is unknown (never spawned,
// or forgotten) or the keeper is lost before the child exited.
func (c *Client) Exit(key string) <-chan unix.WaitStatus {
	w := make(chan unix.WaitStatus, 1)
	c.OnExit(key, func(ws unix.WaitStatus, ok bool) {
		if ok {
			w <- ws
		}
		close(w)
	})
	return w
}

// OnExit calls fn, on a goroutine of its own, with the child's wait
// status once it was reaped (at once for a child that had already
// exited), or with ok false when the key is unknown (never spawned, or
// forgotten) or the keeper is lost before the child exited: Exit
// without a goroutine waiting for it. cancel stops a call that has not
// begun, and reports whether it did.
func (c *Client) OnExit(key string, fn func(ws unix.WaitStatus, ok bool)) (cancel func() bool) {
	e := &exitCall{fn: fn}
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.exits[key]
	switch {
	case st != nil && st.done:
		e.run(st.status, true)
	case st == nil || c.gone:
		e.run(0, false)
	default:
		st.calls = append(st.calls, e)
	}
	return func() bool { return e.taken.CompareAndSwap(false, true) }
}

// Lost returns a channel closed when the keeper is gone (the socket
// reached end of file) or the client was detached.
func (c *Client) Lost() <-chan struct{} { return c.lost }

// Pid returns the keeper's pid, for logs.
func (c *Client) Pid() int { return c.keeperPid }

// Detach closes the connection on purpose: the children live on and the
// keeper's orphan grace starts. It waits for the client's reader and is
// idempotent.
func (c *Client) Detach() error {
	var err error
	c.detach.Do(func() { err = c.c.c.Close() })
	<-c.readDone
	return err
}
