//go:build linux

package keeper

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Defaults for the zero values of Config, and the keeper's fixed waits.
const (
	DefaultOrphanGrace = 10 * time.Minute
	DefaultKillGrace   = 2 * time.Second
	// Linger is how long a keeper with neither children nor a gateway
	// waits before it exits.
	Linger = 5 * time.Second
	// HelloTimeout bounds the wait for a connection's hello.
	HelloTimeout = 5 * time.Second
	// AttachWait is how long a connection waits for the attached gateway
	// to go (a killed gateway's end of file may still be on its way)
	// before it is refused with ErrBusy.
	AttachWait = time.Second
	// maxHandshakes bounds the connections in their hello at once.
	maxHandshakes = 8
)

// Errors returned by Serve, Dial and the Client's methods.
var (
	// ErrBusy: another gateway is attached; the message names its pid.
	ErrBusy = errors.New("keeper: another gateway is attached")
	// ErrVersion: the two sides share no protocol version.
	ErrVersion = errors.New("keeper: unsupported protocol version")
	// ErrRunning: another keeper already serves the directory.
	ErrRunning = errors.New("keeper: another keeper serves this directory")
	// ErrDir: the state directory is not ours, not mode 0700, a symbolic
	// link, or in a parent others may change (CheckDir).
	ErrDir = errors.New("keeper: unsafe state directory")
	// ErrInvalid: a request or message was refused as malformed.
	ErrInvalid = errors.New("keeper: invalid request")
	// ErrExists: a child with that key is already known.
	ErrExists = errors.New("keeper: key in use")
	// ErrUnknown: no child with that key.
	ErrUnknown = errors.New("keeper: no such child")
	// ErrStillRunning: Forget of a child that has not exited.
	ErrStillRunning = errors.New("keeper: child still running")
	// ErrFull: the keeper holds MaxChildren children.
	ErrFull = errors.New("keeper: too many children")
	// ErrLost: the keeper is gone (the socket reached end of file).
	ErrLost = errors.New("keeper: lost the keeper")
	// errExiting: the keeper is stopping; Dial retries with a new one.
	errExiting = errors.New("keeper: exiting")
)

func init() { codes["exiting"] = errExiting }

// idleLinger and childLimit are Linger and MaxChildren; the package's
// tests lower them.
var (
	idleLinger = Linger
	childLimit = MaxChildren
)

// Config configures Serve.
type Config struct {
	Dir         string        // state directory: socket Dir/keeper.sock; 0700, owned by us
	OrphanGrace time.Duration // no gateway attached this long: stop every child (default 10m)
	KillGrace   time.Duration // SIGTERM to SIGKILL when stopping orphans (default 2s)
	Logger      *slog.Logger  // nil: discard
}

// keeper is the state of Serve.
type keeper struct {
	cfg    Config
	log    *slog.Logger
	ln     *net.UnixListener
	end    chan string // why the keeper ends; buffered
	shakes chan struct{}
	conns  sync.WaitGroup // accept loop and connections
	reaps  sync.WaitGroup // one per child until reaped

	mu       sync.Mutex
	children map[string]*child
	order    []string    // keys in spawn order
	cur      *attachment // the attached gateway
	stopping bool
	orphan   *time.Timer
	linger   *time.Timer
}

// child is one process the keeper started.
type child struct {
	key     string
	pid     int
	held    []int // descriptors kept for the gateway
	cgroups []string
	remove  []string
	super   bool // SpawnRequest.Supervised
	meta    []byte
	exited  bool
	status  unix.WaitStatus
	reaped  chan struct{}
}

// attachment is the attached gateway: its end of the socket, its pid.
type attachment struct {
	c    *endpoint
	pid  int
	gone chan struct{} // closed when it detached
}

// Serve is the keeper process's main loop. It returns nil once the orphan
// grace stopped every child, or once it had neither children nor a
// gateway for Linger; it returns an error when it cannot serve Dir (ErrDir,
// ErrRunning). When ctx ends it stops every child as the orphan grace
// would and returns ctx's error. The thread that forks children lives as
// long as the process, so run Serve in a process of its own.
func Serve(ctx context.Context, cfg Config) error {
	cfg = cfg.withDefaults()
	dir, err := checkDir(cfg.Dir)
	if err != nil {
		return err
	}
	cfg.Dir = dir
	lock, err := lockDir(dir)
	if err != nil {
		return err
	}
	defer lock.Close()
	// Descriptors inherited without close-on-exec would reach every child.
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return fmt.Errorf("keeper: mark descriptors close-on-exec: %w", err)
	}
	ln, err := listen(dir)
	if err != nil {
		return err
	}
	k := &keeper{cfg: cfg, log: cfg.Logger, ln: ln, end: make(chan string, 1),
		shakes: make(chan struct{}, maxHandshakes), children: map[string]*child{}}
	k.log.Info("keeper started", "dir", dir, "pid", os.Getpid(),
		"orphan_grace", cfg.OrphanGrace.String(), "kill_grace", cfg.KillGrace.String())
	startForker()
	if forking.leanErr != nil {
		k.log.Info("forking from the keeper's mount namespace", "err", forking.leanErr)
	}
	switch {
	case forking.pass < 0:
		k.log.Info("forking from the keeper's descriptor table: each fork copies it", "err", forking.passErr)
	case forking.passErr != nil:
		k.log.Warn("the forking thread's descriptor table kept copies it should have closed", "err", forking.passErr)
	}
	k.mu.Lock()
	k.armIdle()
	k.mu.Unlock()
	k.conns.Add(1)
	go k.accept()
	var reason string
	select {
	case reason = <-k.end:
	case <-ctx.Done():
		reason = "shutdown"
		err = ctx.Err()
	}
	k.finish(reason)
	return err
}

func (cfg Config) withDefaults() Config {
	if cfg.OrphanGrace <= 0 {
		cfg.OrphanGrace = DefaultOrphanGrace
	}
	if cfg.KillGrace <= 0 {
		cfg.KillGrace = DefaultKillGrace
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return cfg
}

// finish stops taking gateways, stops every child and waits for the
// keeper's goroutines.
func (k *keeper) finish(reason string) {
	k.mu.Lock()
	k.stopping = true
	k.stopTimers()
	a := k.cur
	k.mu.Unlock()
	k.ln.Close() // unlinks the socket: a new gateway starts a new keeper
	if a != nil {
		a.c.c.Close()
	}
	k.stopAll(reason)
	k.conns.Wait()
	k.log.Info("keeper exiting", "reason", reason)
}

// armIdle starts the orphan grace, and the linger when no child is left.
// k.mu is held; a gateway is not attached.
func (k *keeper) armIdle() {
	if k.stopping {
		return
	}
	k.stopTimers()
	k.orphan = time.AfterFunc(k.cfg.OrphanGrace, func() { k.expire("orphan grace", false) })
	if len(k.children) == 0 {
		k.linger = time.AfterFunc(idleLinger, func() { k.expire("idle", true) })
	}
}

func (k *keeper) stopTimers() {
	if k.orphan != nil {
		k.orphan.Stop()
	}
	if k.linger != nil {
		k.linger.Stop()
	}
}

// expire ends the keeper unless a gateway attached meanwhile (or, for the
// linger, a child appeared).
func (k *keeper) expire(reason string, needEmpty bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cur != nil || k.stopping || needEmpty && len(k.children) > 0 {
		return
	}
	k.stopping = true
	k.end <- reason
}

// accept runs until the listener is closed.
func (k *keeper) accept() {
	defer k.conns.Done()
	for {
		uc, err := k.ln.AcceptUnix()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			k.log.Error("accept", "err", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		select {
		case k.shakes <- struct{}{}:
		default:
			k.log.Warn("refused a connection: too many handshakes")
			uc.Close()
			continue
		}
		k.conns.Add(1)
		go k.serveConn(uc)
	}
}

// serveConn checks the peer, takes its hello, attaches it and serves its
// requests until it goes.
func (k *keeper) serveConn(uc *net.UnixConn) {
	defer k.conns.Done()
	defer uc.Close()
	uc.SetWriteBuffer(2 * MaxMessage)
	c := &endpoint{c: uc}
	a, err := k.handshake(c)
	<-k.shakes
	if err == nil {
		err = k.attach(a)
	}
	if err != nil {
		k.log.Warn("refused a gateway", "err", err)
		c.send(message{Op: opRefuse, Code: codeOf(err), Error: err.Error()})
		return
	}
	k.log.Info("gateway attached", "gateway_pid", a.pid)
	defer k.detach(a)
	k.serveRequests(a)
}

// handshake accepts only our own uid and a hello that speaks Version.
func (k *keeper) handshake(c *endpoint) (*attachment, error) {
	cred, err := peerCred(c.c)
	if err != nil {
		return nil, err
	}
	if int(cred.Uid) != os.Geteuid() {
		return nil, fmt.Errorf("%w: peer pid %d has uid %d, not %d", ErrInvalid, cred.Pid, cred.Uid, os.Geteuid())
	}
	c.c.SetReadDeadline(time.Now().Add(HelloTimeout))
	m, files, err := c.recv()
	closeFds(files)
	if err != nil {
		return nil, err
	}
	if m.Op != opHello {
		return nil, fmt.Errorf("%w: first message is %q, not hello", ErrInvalid, m.Op)
	}
	if err := speaks(m); err != nil {
		return nil, err
	}
	c.c.SetReadDeadline(time.Time{})
	return &attachment{c: c, pid: int(cred.Pid), gone: make(chan struct{})}, nil
}

// speaks checks that a hello's range of versions, from its MinVersion
// (its Version when none) to its Version, holds this keeper's Version.
func speaks(m message) error {
	low := m.MinVersion
	if low == 0 {
		low = m.Version
	}
	if Version < low || Version > m.Version {
		return fmt.Errorf("%w: the gateway speaks %d..%d, this keeper %d", ErrVersion, low, m.Version, Version)
	}
	return nil
}

// attach makes s the attached gateway, once the previous one (if any)
// went within AttachWait, and sends it every child the keeper holds.
// Exits reaped meanwhile queue behind the listing on s's write lock.
func (k *keeper) attach(a *attachment) error {
	deadline := time.Now().Add(AttachWait)
	k.mu.Lock()
	for k.cur != nil && !k.stopping && time.Now().Before(deadline) {
		gone := k.cur.gone
		k.mu.Unlock()
		select {
		case <-gone:
		case <-time.After(time.Until(deadline)):
		}
		k.mu.Lock()
	}
	if k.stopping {
		k.mu.Unlock()
		return errExiting
	}
	if k.cur != nil {
		pid := k.cur.pid
		k.mu.Unlock()
		return fmt.Errorf("%w: pid %d", ErrBusy, pid)
	}
	k.cur = a
	k.stopTimers()
	list := make([]message, 0, len(k.order))
	held := make([][]int, 0, len(k.order))
	for _, key := range k.order {
		ch := k.children[key]
		if ch.pid == 0 {
			continue // being forked
		}
		list = append(list, message{Op: opChild, Key: key, Pid: ch.pid, Meta: ch.meta,
			Exited: ch.exited, Status: int(ch.status), Held: len(ch.held)})
		held = append(held, ch.held)
	}
	a.c.mu.Lock()
	defer a.c.mu.Unlock()
	k.mu.Unlock()
	return k.sendListing(a, list, held)
}

// sendListing writes welcome, the children and ready; s.c.mu is held.
func (k *keeper) sendListing(a *attachment, list []message, held [][]int) error {
	welcome, _ := encode(message{Op: opWelcome, Version: Version, Pid: os.Getpid(), Count: len(list)})
	if err := a.c.sendLocked(welcome, nil); err != nil {
		return err
	}
	for i, m := range list {
		b, err := encode(m)
		if err == nil {
			err = a.c.sendLocked(b, held[i])
		}
		if err != nil {
			return fmt.Errorf("keeper: send child %s: %w", m.Key, err)
		}
	}
	ready, _ := encode(message{Op: opReady})
	return a.c.sendLocked(ready, nil)
}

// detach lets s go and starts the orphan grace.
func (k *keeper) detach(a *attachment) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cur != a {
		return
	}
	k.cur = nil
	close(a.gone)
	k.armIdle()
	k.log.Info("gateway detached", "gateway_pid", a.pid, "children", len(k.children))
}

// serveRequests answers s's requests until its connection ends. A
// malformed request is refused and the connection goes on.
func (k *keeper) serveRequests(a *attachment) {
	for {
		m, files, err := a.c.recv()
		if errors.Is(err, ErrInvalid) {
			k.log.Warn("refused a malformed message", "gateway_pid", a.pid, "err", err)
			a.c.send(message{Op: opReply, Seq: m.Seq, Code: codeOf(err), Error: err.Error()})
			continue
		}
		if err != nil {
			if !errors.Is(err, errClosed) && !errors.Is(err, net.ErrClosed) {
				k.log.Warn("gateway connection failed", "gateway_pid", a.pid, "err", err)
			}
			return
		}
		reply := k.handle(a, &m, files)
		reply.Op, reply.Seq = opReply, m.Seq
		if err := a.c.send(reply); err != nil {
			k.log.Warn("reply to the gateway", "gateway_pid", a.pid, "err", err)
		}
	}
}

// handle carries out one request; it owns files.
func (k *keeper) handle(a *attachment, m *message, files []int) message {
	var err error
	var sp Spawned
	switch m.Op {
	case opSpawn:
		sp, err = k.spawn(a, m, files)
	case opAnnotate:
		closeFds(files)
		err = k.annotate(m.Key, m.Meta)
	case opForget:
		closeFds(files)
		err = k.forget(m.Key)
	default:
		closeFds(files)
		err = fmt.Errorf("%w: unknown operation %q", ErrInvalid, m.Op)
	}
	if err != nil {
		return message{Code: codeOf(err), Error: err.Error()}
	}
	return message{Pid: sp.Pid, Placed: sp.Placed, Entered: sp.Entered, Lean: sp.Lean}
}

// spawn forks the child and registers it.
func (k *keeper) spawn(a *attachment, m *message, files []int) (Spawned, error) {
	if m.ArgsFile {
		fd := files[len(files)-1]
		files = files[:len(files)-1]
		var err error
		m.Args, m.Env, err = readArgs(fd, m.Argc)
		unix.Close(fd)
		if err == nil {
			err = checkArgs(m.Args, m.Env)
		}
		if err != nil {
			closeFds(files)
			return Spawned{}, err
		}
	}
	childFiles, held := files[:m.Files], files[m.Files:m.Files+m.Held]
	if m.NetNS { // carried after the child's own, to the forking thread's table
		childFiles = append(childFiles[:m.Files:m.Files], files[m.Files+m.Held])
	}
	defer closeFds(childFiles)
	if err := k.admit(m); err != nil {
		closeFds(held)
		return Spawned{}, err
	}
	res := fork(m, childFiles)
	pid, pidfd, placed := res.pid, res.pidfd, res.placed
	if res.err != nil {
		closeFds(held)
		k.release(m.Key)
		return Spawned{}, res.err
	}
	ch := &child{key: m.Key, pid: pid, held: held, cgroups: m.Cgroups, remove: m.Remove, super: m.Supervised,
		meta: m.Meta, reaped: make(chan struct{})}
	k.mu.Lock()
	k.children[m.Key] = ch
	k.mu.Unlock()
	k.log.Info("spawned", "key", m.Key, "pid", pid, "path", m.Path, "placed", placed, "entered", len(res.entered), "lean", res.lean)
	k.reaps.Add(1)
	go k.await(ch, pidfd)
	return Spawned{Pid: pid, Placed: placed, Entered: res.entered, Lean: res.lean}, nil
}

// admit checks a spawn against the keeper's state and reserves its key.
func (k *keeper) admit(m *message) error {
	for _, p := range m.Remove {
		if !below(k.cfg.Dir, p) || p == filepath.Join(k.cfg.Dir, SocketName) || p == filepath.Join(k.cfg.Dir, LockName) {
			return fmt.Errorf("%w: path to remove %q is not below %s", ErrInvalid, p, k.cfg.Dir)
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	switch {
	case k.stopping:
		return errExiting
	case k.children[m.Key] != nil:
		return fmt.Errorf("%w: %s", ErrExists, m.Key)
	case len(k.children) >= childLimit:
		return fmt.Errorf("%w: it holds %d (exited ones count until forgotten)", ErrFull, childLimit)
	}
	k.children[m.Key] = &child{key: m.Key, reaped: make(chan struct{})} // placeholder until forked
	k.order = append(k.order, m.Key)
	return nil
}

// release drops a reserved key whose fork failed.
func (k *keeper) release(key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.dropLocked(key)
}

func (k *keeper) dropLocked(key string) {
	delete(k.children, key)
	for i, o := range k.order {
		if o == key {
			k.order = append(k.order[:i], k.order[i+1:]...)
			break
		}
	}
}

// await reaps ch, keeps its status and tells the attached gateway.
func (k *keeper) await(ch *child, pidfd *os.File) {
	defer k.reaps.Done()
	ws := reap(ch.pid, pidfd)
	k.mu.Lock()
	ch.exited, ch.status = true, ws
	close(ch.reaped)
	a := k.cur
	k.mu.Unlock()
	k.log.Info("child exited", "key", ch.key, "pid", ch.pid, "status", describe(ws))
	if a != nil {
		if err := a.c.send(message{Op: opExit, Key: ch.key, Status: int(ws)}); err != nil {
			k.log.Warn("report an exit", "key", ch.key, "err", err) // the next gateway gets it
		}
	}
}

func (k *keeper) annotate(key string, meta []byte) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	ch := k.children[key]
	if ch == nil || ch.pid == 0 {
		return fmt.Errorf("%w: %s", ErrUnknown, key)
	}
	ch.meta = meta
	return nil
}

// forget drops an exited child's record and closes its held descriptors.
func (k *keeper) forget(key string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	ch := k.children[key]
	switch {
	case ch == nil || ch.pid == 0:
		return fmt.Errorf("%w: %s", ErrUnknown, key)
	case !ch.exited:
		return fmt.Errorf("%w: %s", ErrStillRunning, key)
	}
	closeFds(ch.held)
	k.dropLocked(key)
	return nil
}

// describe renders a wait status for logs.
func describe(ws unix.WaitStatus) string {
	switch {
	case ws.Exited():
		return fmt.Sprintf("exit %d", ws.ExitStatus())
	case ws.Signaled():
		return "signal " + ws.Signal().String()
	}
	return fmt.Sprintf("status %#x", int(ws))
}
