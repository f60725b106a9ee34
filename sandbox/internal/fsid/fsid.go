//go:build linux

// Package fsid runs a function as another user for the filesystem: the
// calling OS thread's filesystem uid and gid become that user's, its
// supplementary groups none, and everything the function opens, makes or
// writes is checked and owned as that user's, quotas included; then the
// thread takes back what it had. Only the thread changes (setfsuid(2),
// setfsgid(2) and setgroups(2) act on the calling thread alone), so the
// caller runs on a goroutine locked to its thread, and lets that thread
// end with the goroutine, never handing it back to the runtime, when it
// could not take its identity back (ErrStuck).
//
// The package imports nothing of termgate.
package fsid

import (
	"errors"
	"fmt"
	"runtime"
	"slices"

	"golang.org/x/sys/unix"
)

// ErrStuck reports a thread that could not take back its filesystem
// identity: it must end with its goroutine.
var ErrStuck = errors.New("fsid: a thread could not take back its filesystem identity")

// As runs f with the calling thread's filesystem identity set to uid and
// gid, with no supplementary groups, then sets back the thread's own.
// The caller has locked the thread to its goroutine. f's error is
// returned, joined with ErrStuck when the thread could not take back its
// identity.
func As(uid, gid uint32, f func() error) error {
	groups, err := unix.Getgroups()
	if err != nil {
		return fmt.Errorf("fsid: the thread's groups: %w", err)
	}
	prevGID, _ := unix.SetfsgidRetGid(int(gid))
	prevUID, _ := unix.SetfsuidRetUid(int(uid))
	gerr := unix.Setgroups(nil)
	var ferr error
	switch now := current(); {
	case gerr != nil:
		ferr = fmt.Errorf("fsid: drop the thread's groups: %w", gerr)
	case now.uid != int(uid) || now.gid != int(gid) || len(now.groups) > 0:
		ferr = fmt.Errorf("fsid: become %d:%d: the thread is %d:%d with groups %v", uid, gid, now.uid, now.gid, now.groups)
	default:
		ferr = f()
	}
	unix.Setgroups(groups)
	unix.SetfsuidRetUid(prevUID)
	unix.SetfsgidRetGid(prevGID)
	if now := current(); now.uid != prevUID || now.gid != prevGID || !slices.Equal(now.groups, groups) {
		return errors.Join(ferr, fmt.Errorf("%w: it is %d:%d with groups %v, was %d:%d with %v", ErrStuck, now.uid, now.gid, now.groups, prevUID, prevGID, groups))
	}
	return ferr
}

// Run runs f as uid:gid (As) on a goroutine locked to an OS thread of
// its own, which goes back to the runtime after, or ends when it is
// stuck.
func Run(uid, gid uint32, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		err := As(uid, gid, f)
		if !errors.Is(err, ErrStuck) {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

type identity struct {
	uid, gid int
	groups   []int
}

// current is the calling thread's filesystem identity: setfs[ug]id of
// an id that is not valid (-1) changes nothing and returns the current
// one.
func current() identity {
	uid, _ := unix.SetfsuidRetUid(-1)
	gid, _ := unix.SetfsgidRetGid(-1)
	groups, _ := unix.Getgroups()
	return identity{uid, gid, groups}
}
