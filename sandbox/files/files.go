// Package files reads and writes a tenant's workspace from the host as
// the tenant would: every operation runs on an OS thread whose
// filesystem identity is the workspace's uid and gid, with no
// supplementary groups (root's file permissions and groups do not
// apply; what it makes is the tenant's, within the workspace's quota),
// and resolves paths beneath the workspace with os.Root (openat2's
// RESOLVE_BENEATH where the kernel has it): "..", absolute symlinks and
// symlinks that lead out, swapped in during an operation or not, are
// refused, never followed.
//
// A file is written under a temporary name in its directory, resolved
// once, and renamed into place once whole, so a program reading it sees
// the old file or the new one, never a part. A write the workspace has
// no room for (ENOSPC, EDQUOT) leaves nothing behind and reports the
// bytes it had written (NoSpaceError). A resumable upload (StartUpload,
// Append, FinishUpload) gathers its bytes in a hidden file beside its
// target, one Append at a time, and is renamed into place the same way.
//
// Archive and Extract, the tar streams, work on any os.Root, on every
// OS: termgate cp uses them on the client's side. The Tree is Linux's.
//
// The package imports nothing of termgate's but sandbox/internal/fsid.
package files

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"sync"
	"time"
)

// Errors. Each wraps the os error it stands for, where there is one.
var (
	ErrInvalidPath = errors.New("files: invalid path")
	ErrNotFound    = fs.ErrNotExist
	ErrPermission  = fs.ErrPermission
	ErrIsDir       = errors.New("files: is a directory")
	ErrNotDir      = errors.New("files: not a directory")
	ErrNotEmpty    = errors.New("files: directory not empty")
	ErrNotRegular  = errors.New("files: not a regular file")
	// ErrChanged refuses a conditional write whose condition no longer
	// holds (the file changed, or exists, or does not).
	ErrChanged = errors.New("files: the file is not as the condition says")
)

// NoSpaceError reports a write the workspace had no room for: nothing
// of it was kept.
type NoSpaceError struct {
	Written int64 // the bytes written before the workspace was full
	Err     error // ENOSPC or EDQUOT
}

func (e *NoSpaceError) Error() string {
	return fmt.Sprintf("files: the workspace is full after %d bytes: %v", e.Written, e.Err)
}

func (e *NoSpaceError) Unwrap() error { return e.Err }

// Bounds of paths.
const (
	MaxPath  = 4096 // bytes of a path
	MaxName  = 255  // bytes of one name
	MaxDepth = 64   // names in a path
)

// Entry describes a file of the tree, as lstat(2) sees it.
type Entry struct {
	Name   string // the last name of its path ("" for the tree's root)
	Type   Type
	Size   int64
	Mode   fs.FileMode // permission bits
	MTime  time.Time
	Target string // a symlink's target
	Inode  uint64
}

// Type is the kind of a file.
type Type string

// The kinds of files.
const (
	TypeFile    Type = "file"
	TypeDir     Type = "dir"
	TypeSymlink Type = "symlink"
	TypeOther   Type = "other" // devices, fifos, sockets
)

// ETag is an entity tag of the entry's content: it changes when the
// file is replaced or written.
func (e Entry) ETag() string {
	return fmt.Sprintf(`"%x-%x-%x"`, e.Inode, e.Size, e.MTime.UnixNano())
}

// Clean checks a path of the tree, relative to its root ("" or "." is
// the root; a leading "/" is allowed), and returns it clean: names
// joined by "/", none empty, "." or "..", none with NUL, within the
// bounds.
func Clean(p string) (string, error) {
	if len(p) > MaxPath {
		return "", fmt.Errorf("%w: longer than %d bytes", ErrInvalidPath, MaxPath)
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", fmt.Errorf("%w: a NUL byte", ErrInvalidPath)
	}
	var names []string
	for n := range strings.SplitSeq(p, "/") {
		switch {
		case n == "" || n == ".":
			continue
		case n == "..":
			return "", fmt.Errorf("%w: %q: \"..\" is not allowed", ErrInvalidPath, p)
		case len(n) > MaxName:
			return "", fmt.Errorf("%w: a name longer than %d bytes", ErrInvalidPath, MaxName)
		}
		names = append(names, n)
	}
	if len(names) > MaxDepth {
		return "", fmt.Errorf("%w: deeper than %d names", ErrInvalidPath, MaxDepth)
	}
	if len(names) == 0 {
		return ".", nil
	}
	return strings.Join(names, "/"), nil
}

func entry(fi fs.FileInfo) Entry {
	e := Entry{Name: fi.Name(), Size: fi.Size(), Mode: fi.Mode().Perm(), MTime: fi.ModTime()}
	switch m := fi.Mode(); {
	case m.IsRegular():
		e.Type = TypeFile
	case m.IsDir():
		e.Type = TypeDir
	case m&fs.ModeSymlink != 0:
		e.Type = TypeSymlink
	default:
		e.Type = TypeOther
	}
	e.Inode = inode(fi)
	return e
}

// copyBufferSize is the size of the buffers a write copies a body
// through: large enough that a gigabyte is a few thousand system
// calls, not tens of thousands.
const copyBufferSize = 256 << 10

var copyBuffers = sync.Pool{New: func() any { b := make([]byte, copyBufferSize); return &b }}

// copyInto copies r to f through a pooled buffer, as io.Copy would with
// a larger one.
func copyInto(f *os.File, r io.Reader) (int64, error) {
	b := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(b)
	return io.CopyBuffer(struct{ io.Writer }{f}, r, *b)
}

// tempPrefix starts the names of files being written.
const tempPrefix = ".termgate-write-"

// createTemp makes a new file for writing in dir.
func createTemp(root *os.Root, dir string) (string, *os.File, error) {
	for range 10 {
		var b [8]byte
		rand.Read(b[:])
		name := path.Join(dir, tempPrefix+hex.EncodeToString(b[:]))
		f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if !errors.Is(err, fs.ErrExist) {
			return name, f, err
		}
	}
	return "", nil, errors.New("files: no free temporary name")
}
