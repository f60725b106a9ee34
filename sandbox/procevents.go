//go:build linux

package sandbox

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The process event connector's ABI (linux/connector.h, linux/cn_proc.h);
// golang.org/x/sys does not define it.
const (
	cnIdxProc = 0x1 // CN_IDX_PROC, also the multicast group to bind
	cnValProc = 0x1 // CN_VAL_PROC

	procCnMcastListen = 1 // PROC_CN_MCAST_LISTEN
	procCnMcastIgnore = 2 // PROC_CN_MCAST_IGNORE

	procEventFork = 0x00000001
	procEventExec = 0x00000002
	procEventExit = 0x80000000

	procNlmsgHdrLen = 16 // struct nlmsghdr
	procCnMsgLen    = 20 // struct cn_msg without data
	procEventHead   = 16 // what, cpu, timestamp_ns before the union

	// procRecvBuffer is the socket buffer asked for: a fork storm emits
	// three events per short-lived process, and a full buffer loses events
	// for every tracked sandbox at once.
	procRecvBuffer = 8 << 20
	// procReadBuffer holds one datagram; the connector sends one ~80-byte
	// message per event, so this only guards against future growth.
	procReadBuffer = 16 << 10

	// procSelfTestTimeout is far above the milliseconds an exit event takes,
	// even on a loaded host.
	procSelfTestTimeout = 10 * time.Second
)

var errProcSelfTestTimeout = errors.New("timed out")

// procRole is the place of a tracked pid in a sandbox's process tree.
type procRole uint8

const (
	procRoleOuter    procRole = iota // the bwrap we started
	procRoleInit                     // pid 1 of the new pid namespace
	procRoleWorkload                 // the process that execs the command
)

// procMember is what the reader finds for a pid: one map lookup per event.
type procMember struct {
	t    *procTrack
	role procRole
}

// procWatcher follows sandbox process trees through the kernel's process
// event connector. It exists because bwrap's init turns the workload's wait
// status into 128+n and makes a setup failure look like the workload's exit 1;
// the kernel's exit event still carries the raw status.
type procWatcher struct {
	log     *slog.Logger
	file    *os.File // non-blocking, in Go's poller so Close unblocks the reader
	conn    syscall.RawConn
	stopped chan struct{} // closed when the reader returns

	closeOnce sync.Once
	closeErr  error
	closing   atomic.Bool

	mu      sync.Mutex
	members map[uint32]procMember // live pids of tracked trees
	tracked map[*procTrack]struct{}
	dead    bool // the reader has stopped: new tracks start lost
}

// newProcWatcher subscribes to the kernel's process events and starts the
// one goroutine that reads them, owned by the watcher until Close. It fails
// in a network namespace other than the initial one (the connector lives
// only there) and, on older kernels, without CAP_NET_ADMIN. Success does not
// prove that events arrive: from another user or pid namespace the kernel
// ignores the subscription, and events carry pids of the initial pid
// namespace only. selfTest proves it.
func newProcWatcher(log *slog.Logger) (*procWatcher, error) {
	f, err := openProcConnector()
	if err != nil {
		return nil, fmt.Errorf("sandbox: process events: %w", err)
	}
	conn, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("sandbox: process events: %w", err)
	}
	w := newProcState(log)
	w.file, w.conn = f, conn
	go w.run()
	return w, nil
}

// newProcState returns a watcher without a socket, so the bookkeeping can be
// driven with synthetic events.
func newProcState(log *slog.Logger) *procWatcher {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &procWatcher{
		log:     log,
		stopped: make(chan struct{}),
		members: make(map[uint32]procMember),
		tracked: make(map[*procTrack]struct{}),
	}
}

// openProcConnector returns a subscribed connector socket. It is created
// non-blocking so that os.NewFile registers it with the poller.
func openProcConnector() (*os.File, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.NETLINK_CONNECTOR)
	if err != nil {
		return nil, fmt.Errorf("open netlink connector: %w", err)
	}
	if err := setupProcSocket(fd); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), "proc-connector"), nil
}

// setupProcSocket raises the buffer before subscribing so that no event can
// overflow the default one in between.
func setupProcSocket(fd int) error {
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, procRecvBuffer); err != nil {
		// Without CAP_NET_ADMIN the force variant fails; the plain one is
		// capped by net.core.rmem_max but still better than the default.
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, procRecvBuffer); err != nil {
			return fmt.Errorf("set receive buffer: %w", err)
		}
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: cnIdxProc}); err != nil {
		return fmt.Errorf("bind to the process events group: %w", err)
	}
	if err := sendProcMcastOp(fd, procCnMcastListen); err != nil {
		return fmt.Errorf("subscribe: %w", err)
	}
	return nil
}

// sendProcMcastOp sends a subscription change to the kernel. It uses the 4-byte
// form: every kernel accepts it, while the filtered 8-byte form of 6.6+ is
// silently ignored by older ones.
func sendProcMcastOp(fd int, op uint32) error {
	msg := make([]byte, procNlmsgHdrLen+procCnMsgLen+4)
	ne := binary.NativeEndian
	ne.PutUint32(msg[0:], uint32(len(msg)))
	ne.PutUint16(msg[4:], unix.NLMSG_DONE)
	ne.PutUint32(msg[procNlmsgHdrLen:], cnIdxProc)
	ne.PutUint32(msg[procNlmsgHdrLen+4:], cnValProc)
	ne.PutUint16(msg[procNlmsgHdrLen+16:], 4)
	ne.PutUint32(msg[procNlmsgHdrLen+procCnMsgLen:], op)
	return unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
}

// Close unsubscribes, closes the socket, waits for the reader and closes
// done of every track still open. It is idempotent.
func (w *procWatcher) Close() error {
	w.closeOnce.Do(func() { w.closeErr = w.shutdown() })
	return w.closeErr
}

// shutdown unsubscribes explicitly: older kernels count listeners only
// through LISTEN and IGNORE messages, not socket closes, and keep building
// events for every fork while that count stays above zero.
func (w *procWatcher) shutdown() error {
	w.closing.Store(true)
	var unsubscribeErr error
	ctlErr := w.conn.Control(func(fd uintptr) {
		unsubscribeErr = sendProcMcastOp(int(fd), procCnMcastIgnore)
	})
	closeErr := w.file.Close()
	<-w.stopped
	if err := errors.Join(ctlErr, unsubscribeErr, closeErr); err != nil {
		return fmt.Errorf("sandbox: process events: close: %w", err)
	}
	return nil
}

// procReader is the reader's receive state, kept so that its read method
// value is built once rather than a closure per datagram.
type procReader struct {
	buf []byte
	n   int
	err error
}

// read is the RawConn callback; false asks the poller to wait.
func (r *procReader) read(fd uintptr) bool {
	for {
		r.n, r.err = unix.Read(int(fd), r.buf)
		if r.err != unix.EINTR {
			return r.err != unix.EAGAIN
		}
	}
}

// run is the watcher's only goroutine; it stops when the socket is closed
// or fails.
func (w *procWatcher) run() {
	defer close(w.stopped)
	defer w.stopTracking()
	r := &procReader{buf: make([]byte, procReadBuffer)}
	read := r.read
	for {
		err := w.conn.Read(read)
		if err == nil {
			err = r.err
		}
		switch {
		case w.closing.Load():
			return
		case err == nil:
			w.handleDatagram(r.buf[:r.n])
		case errors.Is(err, unix.ENOBUFS):
			w.overflowed(err)
		default:
			w.log.Error("process events: receive failed", "err", err)
			return
		}
	}
}

// handleDatagram applies every event of one datagram.
func (w *procWatcher) handleDatagram(b []byte) {
	for ev := range procEvents(b) {
		w.handle(ev)
	}
}

// overflowed marks every open track lost: the dropped event may have been
// any of theirs. It logs once per overflow rather than per track.
func (w *procWatcher) overflowed(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	lost := 0
	for t := range w.tracked {
		if t.finish(false) {
			lost++
		}
	}
	w.log.Warn("process events: events lost, raw exit statuses of running sandboxes unknown",
		"err", err, "lost_tracks", lost)
}

// stopTracking closes every open track and makes later tracks start closed,
// so no caller waits on a watcher that no longer reads.
func (w *procWatcher) stopTracking() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.dead = true
	for t := range w.tracked {
		t.finish(false)
	}
}

// selfTest proves that exit events reach the watcher by following a short
// child: cat, blocked on its stdin until it is tracked, so that its exit
// cannot precede track. An error means the watcher is blind (for example
// when termgate runs in a pid namespace of its own, so that no event names
// the pid it tracks) or lost events. It waits at most procSelfTestTimeout
// even if ctx has no deadline, since a blind watcher would never answer.
func (w *procWatcher) selfTest(ctx context.Context) error {
	ctx, cancel := context.WithTimeoutCause(ctx, procSelfTestTimeout, errProcSelfTestTimeout)
	defer cancel()
	cmd := exec.Command("cat")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return fmt.Errorf("sandbox: process events: self-test: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("sandbox: process events: self-test: start cat: %w", err)
	}
	t := w.track(cmd.Process.Pid)
	defer w.untrack(t)
	stdin.Close()
	err = awaitProcSelfTest(ctx, t)
	if err != nil {
		cmd.Process.Kill()
	}
	waitErr := cmd.Wait()
	if err == nil && waitErr != nil {
		err = fmt.Errorf("run cat: %w", waitErr)
	}
	if err != nil {
		return fmt.Errorf("sandbox: process events: self-test: %w", err)
	}
	return nil
}

// awaitProcSelfTest waits for the self-test child's exit event and checks that
// it decoded the status the child exited with.
func awaitProcSelfTest(ctx context.Context, t *procTrack) error {
	select {
	case <-t.done():
	case <-ctx.Done():
		return fmt.Errorf("no exit event: %w", context.Cause(ctx))
	}
	if !t.complete() {
		return errors.New("events lost or watcher closed")
	}
	if st := t.outerExit(); st != 0 {
		return fmt.Errorf("exit event reports status %#x, want 0", uint32(st))
	}
	return nil
}

// track starts following the tree under outerPid. It must be called before
// that process can fork: a fork seen before track is not attributed.
func (w *procWatcher) track(outerPid int) *procTrack {
	t := &procTrack{outer: outerPid, alive: 1, finished: make(chan struct{})}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.dead {
		t.finish(false)
		return t
	}
	w.members[uint32(outerPid)] = procMember{t: t, role: procRoleOuter}
	w.tracked[t] = struct{}{}
	return t
}

// untrack stops following t and closes its done channel if still open. Pids
// reused since are left alone: their entries belong to newer tracks.
func (w *procWatcher) untrack(t *procTrack) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, pid := range t.pids() {
		if m, ok := w.members[uint32(pid)]; ok && m.t == t {
			delete(w.members, uint32(pid))
		}
	}
	delete(w.tracked, t)
	t.finish(false)
}

// handle applies one event. Events of untracked pids cost one map lookup.
func (w *procWatcher) handle(ev procEvent) {
	var key uint32
	switch ev.what {
	case procEventFork:
		if ev.childPid != ev.childTgid {
			return // a thread: not a process of the tree
		}
		key = ev.tgid
	case procEventExec:
		key = ev.tgid // a thread's exec reports the leader's pid after de_thread
	case procEventExit:
		if ev.pid != ev.tgid {
			return // a thread; the leader's event carries the process's status
		}
		key = ev.pid
	default:
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	m, ok := w.members[key]
	if !ok {
		return
	}
	switch ev.what {
	case procEventFork:
		if role, ok := m.t.adopt(m.role, int(ev.childPid)); ok {
			w.members[ev.childPid] = procMember{t: m.t, role: role}
		}
	case procEventExec:
		if m.role == procRoleWorkload {
			m.t.markExec()
		}
	case procEventExit:
		// The pid may be reused from now on, by anyone. The workload's
		// stays: an exec from a thread other than its first ends the
		// first thread, and the exec that follows under the same pid
		// says the process lives on (markExec). untrack drops it.
		if m.role != procRoleWorkload {
			delete(w.members, key)
		}
		m.t.exited(m.role, unix.WaitStatus(ev.exitCode))
	}
}

// procTrack is what the watcher learns about one sandbox's process tree.
// All methods are safe for concurrent use.
type procTrack struct {
	outer    int
	finished chan struct{}

	mu          sync.Mutex
	init        int
	workload    int
	execs       int // execs completed by the workload: the init, then the command
	workloadSt  unix.WaitStatus
	workloadEnd bool
	initEnd     bool
	outerSt     unix.WaitStatus
	alive       int  // members forked and not yet seen exiting
	closed      bool // finished is closed
	lost        bool
	// onWorkloadExit runs, on a goroutine of its own, when the workload
	// has exited: the sandbox has no reason to live on.
	onWorkloadExit func()
}

// notifyWorkloadExit sets the function run once the workload has exited.
func (t *procTrack) notifyWorkloadExit(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.onWorkloadExit = f
}

// initPid returns the first process that the outer bwrap forked: pid 1 of
// the sandbox's pid namespace, as a host pid.
func (t *procTrack) initPid() (int, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.init, t.init != 0 && !t.initEnd
}

// workloadPid returns the first process that init forked: the one that
// execs the command.
func (t *procTrack) workloadPid() (int, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.workload, t.workload != 0 && !t.workloadEnd
}

// blind reports whether the track stopped seeing events before the tree
// exited (events were lost, or the watcher stopped): what it knows of the
// workload may then be stale, and /proc has to answer instead.
func (t *procTrack) blind() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lost
}

// execed reports whether the workload completed an exec, which tells a bwrap
// setup failure (no exec) from the command's own exit.
func (t *procTrack) execed() bool { return t.execCount() > 0 }

// execCount returns how many execs the workload completed. The init
// execs the command in place, so the command itself ran only when the
// count exceeds initExecs.
func (t *procTrack) execCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.execs
}

// workloadExit returns the workload's raw wait status, which bwrap's init
// would have folded into 128+n.
func (t *procTrack) workloadExit() (unix.WaitStatus, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.workloadSt, t.workloadEnd
}

// outerExit returns the outer process's raw wait status once it exited.
func (t *procTrack) outerExit() unix.WaitStatus {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.outerSt
}

// done is closed once the exit events of outer and of every init and
// workload it had have been processed, when events were lost, or when the
// watcher stopped. Waiting for all three, not just outer, matters because
// the kernel emits a process's exit event after its parent may already have
// reaped it, so outer's event can overtake the workload's.
func (t *procTrack) done() <-chan struct{} { return t.finished }

// complete reports whether done closed because the whole tree was seen
// exiting with no event lost since track.
func (t *procTrack) complete() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closed && !t.lost
}

// adopt records child as the next member of the tree if parent is the
// member that forks it, and returns the child's role.
func (t *procTrack) adopt(parent procRole, child int) (procRole, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case parent == procRoleOuter && t.init == 0:
		t.init = child
		t.alive++
		return procRoleInit, true
	case parent == procRoleInit && t.workload == 0:
		t.workload = child
		t.alive++
		return procRoleWorkload, true
	}
	return 0, false
}

// markExec records that the workload completed an exec. One that follows
// the workload's exit comes from a thread other than its first, which the
// kernel ended on the way: the exit was that thread's, not the process's.
func (t *procTrack) markExec() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.execs++
	if t.workloadEnd && !t.closed {
		t.workloadSt, t.workloadEnd = 0, false
		t.alive++
	}
}

// workloadHostPid returns the workload's host pid, exited or not.
func (t *procTrack) workloadHostPid() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.workload
}

// workloadEnded reports whether the workload's exit was seen and not
// since undone by an exec (see markExec).
func (t *procTrack) workloadEnded() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.workloadEnd
}

// exited records a member's exit and finishes the track after the last one.
func (t *procTrack) exited(role procRole, st unix.WaitStatus) {
	t.mu.Lock()
	defer t.mu.Unlock()
	// An exited pid may be reused by anyone: initPid and workloadPid stop
	// answering, so that no signal meant for the sandbox reaches a stranger.
	switch role {
	case procRoleWorkload:
		t.workloadSt, t.workloadEnd = st, true
		if t.onWorkloadExit != nil {
			go t.onWorkloadExit()
		}
	case procRoleInit:
		t.initEnd = true
	case procRoleOuter:
		t.outerSt = st
	}
	t.alive--
	if t.alive == 0 {
		t.finishLocked(true)
	}
}

// finish closes done and reports whether this call did; complete is false
// when the track ends for any reason other than seeing the whole tree exit.
func (t *procTrack) finish(complete bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.finishLocked(complete)
}

func (t *procTrack) finishLocked(complete bool) bool {
	if t.closed {
		return false
	}
	t.closed, t.lost = true, !complete
	close(t.finished)
	return true
}

// pids lists the members that may still be in the watcher's map.
func (t *procTrack) pids() []int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return []int{t.outer, t.init, t.workload}
}

// procEvent is the part of a proc_event the watcher uses. For a fork, pid
// and tgid are the parent's.
type procEvent struct {
	what      uint32
	pid       uint32
	tgid      uint32
	childPid  uint32
	childTgid uint32
	exitCode  uint32
}

// procEvents yields the process events of one connector datagram, which may
// hold several netlink messages. Malformed or foreign messages are skipped:
// they come from the kernel, and one bad message must not stop the reader.
func procEvents(b []byte) iter.Seq[procEvent] {
	return func(yield func(procEvent) bool) {
		ne := binary.NativeEndian
		for len(b) >= procNlmsgHdrLen {
			size := int(ne.Uint32(b[0:]))
			if size < procNlmsgHdrLen || size > len(b) {
				return
			}
			if ne.Uint16(b[4:]) == unix.NLMSG_DONE {
				if ev, ok := decodeProcCnMsg(b[procNlmsgHdrLen:size]); ok && !yield(ev) {
					return
				}
			}
			b = b[min(procNlmsgAlign(size), len(b)):]
		}
	}
}

// procNlmsgAlign rounds a message length up as NLMSG_ALIGN does.
func procNlmsgAlign(n int) int { return (n + 3) &^ 3 }

// decodeProcCnMsg decodes a cn_msg carrying a proc_event.
func decodeProcCnMsg(b []byte) (procEvent, bool) {
	ne := binary.NativeEndian
	if len(b) < procCnMsgLen || ne.Uint32(b[0:]) != cnIdxProc || ne.Uint32(b[4:]) != cnValProc {
		return procEvent{}, false
	}
	size := int(ne.Uint16(b[16:]))
	if size > len(b)-procCnMsgLen {
		return procEvent{}, false
	}
	return decodeProcEvent(b[procCnMsgLen : procCnMsgLen+size])
}

// decodeProcEvent decodes the fork, exec and exit members of a proc_event.
func decodeProcEvent(b []byte) (procEvent, bool) {
	ne := binary.NativeEndian
	if len(b) < procEventHead+8 {
		return procEvent{}, false
	}
	ev := procEvent{what: ne.Uint32(b[0:])}
	u := b[procEventHead:]
	ev.pid, ev.tgid = ne.Uint32(u[0:]), ne.Uint32(u[4:])
	switch ev.what {
	case procEventFork:
		if len(u) < 16 {
			return procEvent{}, false
		}
		ev.childPid, ev.childTgid = ne.Uint32(u[8:]), ne.Uint32(u[12:])
	case procEventExit:
		if len(u) < 12 {
			return procEvent{}, false
		}
		ev.exitCode = ne.Uint32(u[8:])
	}
	return ev, true
}
