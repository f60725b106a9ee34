//go:build linux

package procevents

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

	mcastListen = 1 // PROC_CN_MCAST_LISTEN
	mcastIgnore = 2 // PROC_CN_MCAST_IGNORE

	eventFork = 0x00000001
	eventExec = 0x00000002
	eventExit = 0x80000000

	nlmsgHdrLen = 16 // struct nlmsghdr
	cnMsgLen    = 20 // struct cn_msg without data
	eventHead   = 16 // what, cpu, timestamp_ns before the union

	// recvBuffer is the socket buffer asked for: a fork storm emits
	// three events per short-lived process, and a full buffer loses events
	// for every tracked sandbox at once.
	recvBuffer = 8 << 20
	// readBuffer holds one datagram; the connector sends one ~80-byte
	// message per event, so this only guards against future growth.
	readBuffer = 16 << 10

	// selfTestTimeout is far above the milliseconds an exit event takes,
	// even on a loaded host.
	selfTestTimeout = 10 * time.Second
)

var errSelfTestTimeout = errors.New("timed out")

// memberRole is the place of a tracked pid in a sandbox's process tree.
type memberRole uint8

const (
	roleOuter    memberRole = iota // the bwrap we started
	roleInit                       // pid 1 of the new pid namespace
	roleWorkload                   // the process that execs the command
)

// member is what the reader finds for a pid: one map lookup per event.
type member struct {
	t    *Track
	role memberRole
}

// Watcher follows sandbox process trees through the kernel's process
// event connector. It exists because bwrap's init turns the workload's wait
// status into 128+n and makes a setup failure look like the workload's exit 1;
// the kernel's exit event still carries the raw status.
type Watcher struct {
	log     *slog.Logger
	file    *os.File // non-blocking, in Go's poller so Close unblocks the reader
	conn    syscall.RawConn
	stopped chan struct{} // closed when the reader returns

	closeOnce sync.Once
	closeErr  error
	closing   atomic.Bool

	mu      sync.Mutex
	members map[uint32]member // live pids of tracked trees
	tracked map[*Track]struct{}
	dead    bool // the reader has stopped: new tracks start lost
}

// New subscribes to the kernel's process events and starts the
// one goroutine that reads them, owned by the watcher until Close. It fails
// in a network namespace other than the initial one (the connector lives
// only there) and, on older kernels, without CAP_NET_ADMIN. Success does not
// prove that events arrive: from another user or pid namespace the kernel
// ignores the subscription, and events carry pids of the initial pid
// namespace only. selfTest proves it.
func New(log *slog.Logger) (*Watcher, error) {
	f, err := openConnector()
	if err != nil {
		return nil, fmt.Errorf("procevents: %w", err)
	}
	conn, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("procevents: %w", err)
	}
	w := newWatcher(log)
	w.file, w.conn = f, conn
	go w.run()
	return w, nil
}

// newWatcher returns a watcher without a socket, so the bookkeeping can be
// driven with synthetic events.
func newWatcher(log *slog.Logger) *Watcher {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Watcher{
		log:     log,
		stopped: make(chan struct{}),
		members: make(map[uint32]member),
		tracked: make(map[*Track]struct{}),
	}
}

// openConnector returns a subscribed connector socket. It is created
// non-blocking so that os.NewFile registers it with the poller.
func openConnector() (*os.File, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.NETLINK_CONNECTOR)
	if err != nil {
		return nil, fmt.Errorf("open netlink connector: %w", err)
	}
	if err := setupSocket(fd); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), "proc-connector"), nil
}

// setupSocket raises the buffer before subscribing so that no event can
// overflow the default one in between.
func setupSocket(fd int) error {
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, recvBuffer); err != nil {
		// Without CAP_NET_ADMIN the force variant fails; the plain one is
		// capped by net.core.rmem_max but still better than the default.
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, recvBuffer); err != nil {
			return fmt.Errorf("set receive buffer: %w", err)
		}
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: cnIdxProc}); err != nil {
		return fmt.Errorf("bind to the process events group: %w", err)
	}
	if err := sendMcastOp(fd, mcastListen); err != nil {
		return fmt.Errorf("subscribe: %w", err)
	}
	return nil
}

// sendMcastOp sends a subscription change to the kernel. It uses the 4-byte
// form: every kernel accepts it, while the filtered 8-byte form of 6.6+ is
// silently ignored by older ones.
func sendMcastOp(fd int, op uint32) error {
	msg := make([]byte, nlmsgHdrLen+cnMsgLen+4)
	ne := binary.NativeEndian
	ne.PutUint32(msg[0:], uint32(len(msg)))
	ne.PutUint16(msg[4:], unix.NLMSG_DONE)
	ne.PutUint32(msg[nlmsgHdrLen:], cnIdxProc)
	ne.PutUint32(msg[nlmsgHdrLen+4:], cnValProc)
	ne.PutUint16(msg[nlmsgHdrLen+16:], 4)
	ne.PutUint32(msg[nlmsgHdrLen+cnMsgLen:], op)
	return unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
}

// Close unsubscribes, closes the socket, waits for the reader and closes
// Done of every track still open. It is idempotent.
func (w *Watcher) Close() error {
	w.closeOnce.Do(func() { w.closeErr = w.shutdown() })
	return w.closeErr
}

// shutdown unsubscribes explicitly: older kernels count listeners only
// through LISTEN and IGNORE messages, not socket closes, and keep building
// events for every fork while that count stays above zero.
func (w *Watcher) shutdown() error {
	w.closing.Store(true)
	var unsubscribeErr error
	ctlErr := w.conn.Control(func(fd uintptr) {
		unsubscribeErr = sendMcastOp(int(fd), mcastIgnore)
	})
	closeErr := w.file.Close()
	<-w.stopped
	if err := errors.Join(ctlErr, unsubscribeErr, closeErr); err != nil {
		return fmt.Errorf("procevents: close: %w", err)
	}
	return nil
}

// reader is the reader's receive state, kept so that its read method
// value is built once rather than a closure per datagram.
type reader struct {
	buf []byte
	n   int
	err error
}

// read is the RawConn callback; false asks the poller to wait.
func (r *reader) read(fd uintptr) bool {
	for {
		r.n, r.err = unix.Read(int(fd), r.buf)
		if r.err != unix.EINTR {
			return r.err != unix.EAGAIN
		}
	}
}

// run is the watcher's only goroutine; it stops when the socket is closed
// or fails.
func (w *Watcher) run() {
	defer close(w.stopped)
	defer w.stopTracking()
	r := &reader{buf: make([]byte, readBuffer)}
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
func (w *Watcher) handleDatagram(b []byte) {
	for ev := range parseEvents(b) {
		w.handle(ev)
	}
}

// overflowed marks every open track lost: the dropped event may have been
// any of theirs. It logs once per overflow rather than per track.
func (w *Watcher) overflowed(err error) {
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
func (w *Watcher) stopTracking() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.dead = true
	for t := range w.tracked {
		t.finish(false)
	}
}

// SelfTest proves that exit events reach the watcher by following a short
// child: cat, blocked on its stdin until it is tracked, so that its exit
// cannot precede track. An error means the watcher is blind (for example
// when termgate runs in a pid namespace of its own, so that no event names
// the pid it tracks) or lost events. It waits at most selfTestTimeout
// even if ctx has no deadline, since a blind watcher would never answer.
func (w *Watcher) SelfTest(ctx context.Context) error {
	ctx, cancel := context.WithTimeoutCause(ctx, selfTestTimeout, errSelfTestTimeout)
	defer cancel()
	cmd := exec.Command("cat")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return fmt.Errorf("procevents: self-test: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("procevents: self-test: start cat: %w", err)
	}
	t := w.Track(cmd.Process.Pid)
	defer w.Untrack(t)
	stdin.Close()
	err = awaitSelfTest(ctx, t)
	if err != nil {
		cmd.Process.Kill()
	}
	waitErr := cmd.Wait()
	if err == nil && waitErr != nil {
		err = fmt.Errorf("run cat: %w", waitErr)
	}
	if err != nil {
		return fmt.Errorf("procevents: self-test: %w", err)
	}
	return nil
}

// awaitSelfTest waits for the self-test child's exit event and checks that
// it decoded the status the child exited with.
func awaitSelfTest(ctx context.Context, t *Track) error {
	select {
	case <-t.Done():
	case <-ctx.Done():
		return fmt.Errorf("no exit event: %w", context.Cause(ctx))
	}
	if !t.Complete() {
		return errors.New("events lost or watcher closed")
	}
	if st := t.OuterExit(); st != 0 {
		return fmt.Errorf("exit event reports status %#x, want 0", uint32(st))
	}
	return nil
}

// Track starts following the tree under outerPid. It must be called before
// that process can fork: a fork seen before track is not attributed.
func (w *Watcher) Track(outerPid int) *Track {
	t := &Track{outer: outerPid, alive: 1, finished: make(chan struct{})}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.dead {
		t.finish(false)
		return t
	}
	w.members[uint32(outerPid)] = member{t: t, role: roleOuter}
	w.tracked[t] = struct{}{}
	return t
}

// Untrack stops following t and closes its done channel if still open. Pids
// reused since are left alone: their entries belong to newer tracks.
func (w *Watcher) Untrack(t *Track) {
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
func (w *Watcher) handle(ev event) {
	var key uint32
	switch ev.what {
	case eventFork:
		if ev.childPid != ev.childTgid {
			return // a thread: not a process of the tree
		}
		key = ev.tgid
	case eventExec:
		key = ev.tgid // a thread's exec reports the leader's pid after de_thread
	case eventExit:
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
	case eventFork:
		if role, ok := m.t.adopt(m.role, int(ev.childPid)); ok {
			w.members[ev.childPid] = member{t: m.t, role: role}
		}
	case eventExec:
		if m.role == roleWorkload {
			m.t.markExec()
		}
	case eventExit:
		// The pid may be reused from now on, by anyone. The workload's
		// stays: an exec from a thread other than its first ends the
		// first thread, and the exec that follows under the same pid
		// says the process lives on (markExec). untrack drops it.
		if m.role != roleWorkload {
			delete(w.members, key)
		}
		m.t.exited(m.role, unix.WaitStatus(ev.exitCode))
	}
}

// Track is what the watcher learns about one sandbox's process tree.
// All methods are safe for concurrent use.
type Track struct {
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
	skip        int  // children of the init before the workload (SkipInitChildren)
	closed      bool // finished is closed
	lost        bool
	// onWorkloadExit runs, on a goroutine of its own, when the workload
	// has exited: the sandbox has no reason to live on.
	onWorkloadExit func()
}

// SkipInitChildren says the init forks n helpers before the workload,
// each to be left out of the tree: a setuid bwrap's pid 1 forks the
// unprivileged half of its setup first. Call it before the tree forks.
func (t *Track) SkipInitChildren(n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.skip = n
}

// NotifyWorkloadExit sets the function run once the workload has exited.
func (t *Track) NotifyWorkloadExit(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.onWorkloadExit = f
}

// InitPid returns the first process that the outer bwrap forked: pid 1 of
// the sandbox's pid namespace, as a host pid.
func (t *Track) InitPid() (int, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.init, t.init != 0 && !t.initEnd
}

// WorkloadPid returns the first process that init forked: the one that
// execs the command.
func (t *Track) WorkloadPid() (int, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.workload, t.workload != 0 && !t.workloadEnd
}

// Blind reports whether the track stopped seeing events before the tree
// exited (events were lost, or the watcher stopped): what it knows of the
// workload may then be stale, and /proc has to answer instead.
func (t *Track) Blind() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lost
}

// Execed reports whether the workload completed an exec, which tells a bwrap
// setup failure (no exec) from the command's own exit.
func (t *Track) Execed() bool { return t.ExecCount() > 0 }

// ExecCount returns how many execs the workload completed. The init
// execs the command in place, so the command itself ran only when the
// count exceeds the execs the sandbox makes before it (bwrap's of the init).
func (t *Track) ExecCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.execs
}

// WorkloadExit returns the workload's raw wait status, which bwrap's init
// would have folded into 128+n.
func (t *Track) WorkloadExit() (unix.WaitStatus, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.workloadSt, t.workloadEnd
}

// OuterExit returns the outer process's raw wait status once it exited.
func (t *Track) OuterExit() unix.WaitStatus {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.outerSt
}

// Done is closed once the exit events of outer and of every init and
// workload it had have been processed, when events were lost, or when the
// watcher stopped. Waiting for all three, not just outer, matters because
// the kernel emits a process's exit event after its parent may already have
// reaped it, so outer's event can overtake the workload's.
func (t *Track) Done() <-chan struct{} { return t.finished }

// Complete reports whether done closed because the whole tree was seen
// exiting with no event lost since track.
func (t *Track) Complete() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closed && !t.lost
}

// adopt records child as the next member of the tree if parent is the
// member that forks it, and returns the child's role.
func (t *Track) adopt(parent memberRole, child int) (memberRole, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case parent == roleOuter && t.init == 0:
		t.init = child
		t.alive++
		return roleInit, true
	case parent == roleInit && t.workload == 0 && t.skip > 0:
		t.skip--
	case parent == roleInit && t.workload == 0:
		t.workload = child
		t.alive++
		return roleWorkload, true
	}
	return 0, false
}

// markExec records that the workload completed an exec. One that follows
// the workload's exit comes from a thread other than its first, which the
// kernel ended on the way: the exit was that thread's, not the process's.
func (t *Track) markExec() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.execs++
	if t.workloadEnd && !t.closed {
		t.workloadSt, t.workloadEnd = 0, false
		t.alive++
	}
}

// WorkloadHostPid returns the workload's host pid, exited or not.
func (t *Track) WorkloadHostPid() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.workload
}

// WorkloadEnded reports whether the workload's exit was seen and not
// since undone by an exec (see markExec).
func (t *Track) WorkloadEnded() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.workloadEnd
}

// exited records a member's exit and finishes the track after the last one.
func (t *Track) exited(role memberRole, st unix.WaitStatus) {
	t.mu.Lock()
	defer t.mu.Unlock()
	// An exited pid may be reused by anyone: initPid and workloadPid stop
	// answering, so that no signal meant for the sandbox reaches a stranger.
	switch role {
	case roleWorkload:
		t.workloadSt, t.workloadEnd = st, true
		if t.onWorkloadExit != nil {
			go t.onWorkloadExit()
		}
	case roleInit:
		t.initEnd = true
	case roleOuter:
		t.outerSt = st
	}
	t.alive--
	if t.alive == 0 {
		t.finishLocked(true)
	}
}

// finish closes done and reports whether this call did; complete is false
// when the track ends for any reason other than seeing the whole tree exit.
func (t *Track) finish(complete bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.finishLocked(complete)
}

func (t *Track) finishLocked(complete bool) bool {
	if t.closed {
		return false
	}
	t.closed, t.lost = true, !complete
	close(t.finished)
	return true
}

// pids lists the members that may still be in the watcher's map.
func (t *Track) pids() []int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return []int{t.outer, t.init, t.workload}
}

// event is the part of a proc_event the watcher uses. For a fork, pid
// and tgid are the parent's.
type event struct {
	what      uint32
	pid       uint32
	tgid      uint32
	childPid  uint32
	childTgid uint32
	exitCode  uint32
}

// parseEvents yields the process events of one connector datagram, which may
// hold several netlink messages. Malformed or foreign messages are skipped:
// they come from the kernel, and one bad message must not stop the reader.
func parseEvents(b []byte) iter.Seq[event] {
	return func(yield func(event) bool) {
		ne := binary.NativeEndian
		for len(b) >= nlmsgHdrLen {
			size := int(ne.Uint32(b[0:]))
			if size < nlmsgHdrLen || size > len(b) {
				return
			}
			if ne.Uint16(b[4:]) == unix.NLMSG_DONE {
				if ev, ok := decodeCnMsg(b[nlmsgHdrLen:size]); ok && !yield(ev) {
					return
				}
			}
			b = b[min(nlmsgAlign(size), len(b)):]
		}
	}
}

// nlmsgAlign rounds a message length up as NLMSG_ALIGN does.
func nlmsgAlign(n int) int { return (n + 3) &^ 3 }

// decodeCnMsg decodes a cn_msg carrying a proc_event.
func decodeCnMsg(b []byte) (event, bool) {
	ne := binary.NativeEndian
	if len(b) < cnMsgLen || ne.Uint32(b[0:]) != cnIdxProc || ne.Uint32(b[4:]) != cnValProc {
		return event{}, false
	}
	size := int(ne.Uint16(b[16:]))
	if size > len(b)-cnMsgLen {
		return event{}, false
	}
	return decodeEvent(b[cnMsgLen : cnMsgLen+size])
}

// decodeEvent decodes the fork, exec and exit members of a proc_event.
func decodeEvent(b []byte) (event, bool) {
	ne := binary.NativeEndian
	if len(b) < eventHead+8 {
		return event{}, false
	}
	ev := event{what: ne.Uint32(b[0:])}
	u := b[eventHead:]
	ev.pid, ev.tgid = ne.Uint32(u[0:]), ne.Uint32(u[4:])
	switch ev.what {
	case eventFork:
		if len(u) < 16 {
			return event{}, false
		}
		ev.childPid, ev.childTgid = ne.Uint32(u[8:]), ne.Uint32(u[12:])
	case eventExit:
		if len(u) < 12 {
			return event{}, false
		}
		ev.exitCode = ne.Uint32(u[8:])
	}
	return ev, true
}
