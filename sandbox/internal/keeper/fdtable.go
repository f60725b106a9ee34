//go:build linux

package keeper

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"
)

// The forking thread forks from a descriptor table of its own. A fork
// copies the forking thread's table and the child's exec closes the copy
// again; the keeper's table holds every child's parent ends and pidfd,
// about 3 descriptors a shell, so each spawn cost more the more shells
// were open (BenchmarkSpawn/keeper-beside-500). The thread's own table
// holds only what the Go runtime may use on any thread and the end of a
// socket; each request's descriptors are passed into it, used for the
// fork and closed there.
//
// Its numbers mean nothing to other threads, and theirs nothing to it:
// what the forking thread opens it closes itself (no *os.File of its may
// reach a finalizer), and it hands out pids, never descriptors.

// ownTable gives the calling thread, which must be locked to its
// goroutine for good, a descriptor table of its own. It keeps standard
// input, output and error, the runtime's poller descriptors and recv,
// the end of a socket that takes descriptors into it (passFiles,
// takeFiles); send is the other end. Both are also in the process's
// table, where the caller closes recv. It returns -1 for both, and why,
// when the thread still shares the process's table; with the ends, an
// error says the new table kept more than it should.
func ownTable() (recv, send int, err error) {
	keep, err := pollerFds()
	if err != nil {
		return -1, -1, err
	}
	ends, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, -1, fmt.Errorf("keeper: descriptor passing socket: %w", err)
	}
	if err := unix.Unshare(unix.CLONE_FILES); err != nil {
		closeFds(ends[:])
		return -1, -1, fmt.Errorf("keeper: a descriptor table of the forking thread's own: %w", err)
	}
	return ends[0], ends[1], closeAllBut(append(keep, 0, 1, 2, ends[0]))
}

// pollerFds lists the descriptors of the runtime's poller, which any
// thread may use (a timer's change writes to its eventfd from whichever
// thread made it), after making sure the poller exists.
func pollerFds() ([]int, error) {
	r, w, err := os.Pipe() // a pollable file: the poller starts if it had not
	if err != nil {
		return nil, fmt.Errorf("keeper: start the poller: %w", err)
	}
	r.Close()
	w.Close()
	entries, err := os.ReadDir("/proc/thread-self/fd")
	if err != nil {
		return nil, fmt.Errorf("keeper: list descriptors: %w", err)
	}
	var fds []int
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		switch link, _ := os.Readlink("/proc/thread-self/fd/" + e.Name()); link {
		case "anon_inode:[eventpoll]", "anon_inode:[eventfd]":
			fds = append(fds, fd)
		}
	}
	if len(fds) < 2 {
		return nil, fmt.Errorf("keeper: the runtime's poller descriptors not found among %d", len(entries))
	}
	return fds, nil
}

// closeAllBut closes every descriptor of the calling thread's table but
// keep.
func closeAllBut(keep []int) error {
	slices.Sort(keep)
	keep = slices.Compact(keep)
	var errs []error
	low := uint(0)
	for _, fd := range keep {
		if uint(fd) > low {
			errs = append(errs, unix.CloseRange(low, uint(fd)-1, 0))
		}
		low = uint(fd) + 1
	}
	errs = append(errs, unix.CloseRange(low, ^uint(0), 0))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("keeper: close the forking thread's copies: %w", err)
	}
	return nil
}

// passFiles sends files, descriptors of the process's table, to the
// forking thread over sock, with their count: every request sends one
// message, none included.
func passFiles(sock int, files []int) error {
	var oob []byte
	if len(files) > 0 {
		oob = unix.UnixRights(files...)
	}
	count := binary.LittleEndian.AppendUint16(nil, uint16(len(files)))
	for {
		err := unix.Sendmsg(sock, count, oob, nil, 0)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return fmt.Errorf("keeper: pass descriptors to the forking thread: %w", err)
		}
		return nil
	}
}

// takeFiles receives the next request's descriptors into the calling
// thread's table and checks there are want of them.
func takeFiles(sock, want int) ([]int, error) {
	buf := make([]byte, 4)
	oob := make([]byte, unix.CmsgSpace(4*MaxFiles))
	var n, noob, flags int
	var err error
	for {
		n, noob, flags, _, err = unix.Recvmsg(sock, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("keeper: take descriptors in the forking thread: %w", err)
	}
	var fds []int
	msgs, err := unix.ParseSocketControlMessage(oob[:noob])
	for _, m := range msgs {
		rights, rerr := unix.ParseUnixRights(&m)
		fds = append(fds, rights...)
		err = errors.Join(err, rerr)
	}
	if err == nil && (flags&(unix.MSG_CTRUNC|unix.MSG_TRUNC) != 0 || n != 2 ||
		int(binary.LittleEndian.Uint16(buf)) != want || len(fds) != want) {
		err = fmt.Errorf("%d descriptors came, %d were sent, %d wanted", len(fds), binary.LittleEndian.Uint16(buf), want)
	}
	if err != nil {
		closeFds(fds)
		return nil, fmt.Errorf("keeper: take descriptors in the forking thread: %w", err)
	}
	return fds, nil
}
