//go:build linux

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
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/termgate/termgate/sandbox/internal/fsid"
	"golang.org/x/sys/unix"
)

// Tree is a workspace seen as its tenant. Its methods are safe for
// concurrent use.
type Tree struct {
	dir      string
	uid, gid uint32
	switchTo bool // termgate is another user than the tenant's: become it
}

// New returns the tree of the workspace at dir (absolute), owned by
// uid:gid. When termgate runs as another user, operations become that
// user, which needs CAP_SETUID (root); when it runs as uid itself, they
// run as it is.
func New(dir string, uid, gid uint32) *Tree {
	return &Tree{dir: dir, uid: uid, gid: gid, switchTo: uint32(os.Geteuid()) != uid}
}

// run runs f with the tree's root, as the tree's user.
func (t *Tree) run(f func(r *os.Root) error) error {
	op := func() error {
		r, err := os.OpenRoot(t.dir)
		if err != nil {
			return fmt.Errorf("files: open the workspace: %w", err)
		}
		defer r.Close()
		return f(r)
	}
	if !t.switchTo {
		return op()
	}
	return fsid.Run(t.uid, t.gid, op)
}

// Stat describes the file at p, not following a last symlink.
func (t *Tree) Stat(p string) (Entry, error) {
	p, err := Clean(p)
	if err != nil {
		return Entry{}, err
	}
	var e Entry
	err = t.run(func(r *os.Root) error {
		e, err = stat(r, p)
		return err
	})
	return e, translate(err)
}

func stat(r *os.Root, p string) (Entry, error) {
	fi, err := r.Lstat(p)
	if err != nil {
		return Entry{}, err
	}
	e := entry(fi)
	if p == "." {
		e.Name = ""
	}
	if e.Type == TypeSymlink {
		e.Target, _ = r.Readlink(p)
	}
	return e, nil
}

// List lists the directory at p by name, from the first name after
// after, at most limit entries (1 or more); more says whether others
// follow.
func (t *Tree) List(p, after string, limit int) (entries []Entry, more bool, err error) {
	if p, err = Clean(p); err != nil {
		return nil, false, err
	}
	err = t.run(func(r *os.Root) error {
		d, err := r.Open(p)
		if err != nil {
			return err
		}
		defer d.Close()
		names, err := d.Readdirnames(-1)
		if err != nil {
			return notDir(err)
		}
		slices.Sort(names)
		i, _ := slices.BinarySearch(names, after)
		if i < len(names) && names[i] == after {
			i++
		}
		for _, n := range names[i:] {
			if len(entries) == limit {
				more = true
				break
			}
			e, err := stat(r, path.Join(p, n))
			if errors.Is(err, fs.ErrNotExist) {
				continue // removed meanwhile
			}
			if err != nil {
				return err
			}
			entries = append(entries, e)
		}
		return nil
	})
	return entries, more, translate(err)
}

// notDir names Readdirnames' failure on a file that is no directory.
func notDir(err error) error {
	if errors.Is(err, syscall.ENOTDIR) {
		return ErrNotDir
	}
	return err
}

// Open opens the regular file at p for reading (a symlink within the
// tree is followed); the caller closes it.
func (t *Tree) Open(p string) (*os.File, Entry, error) {
	p, err := Clean(p)
	if err != nil {
		return nil, Entry{}, err
	}
	var f *os.File
	var e Entry
	err = t.run(func(r *os.Root) error {
		if f, err = r.OpenFile(p, os.O_RDONLY|unix.O_NONBLOCK, 0); err != nil {
			return err
		}
		fi, err := f.Stat()
		if err == nil && !fi.Mode().IsRegular() {
			err = ErrNotRegular
			if fi.IsDir() {
				err = ErrIsDir
			}
		}
		if err != nil {
			f.Close()
			return err
		}
		e = entry(fi)
		return nil
	})
	return f, e, translate(err)
}

// WriteOptions are a write's.
type WriteOptions struct {
	// Mode is the file's permission bits (0: the replaced file's, or
	// 0644); setuid, setgid and sticky bits are refused.
	Mode fs.FileMode
	// Check, when set, is given the file as it is just before the new
	// one replaces it (nil when there is none); an error it returns
	// (ErrChanged) keeps the old file.
	Check func(old *Entry) error
}

// Write writes the file at p from r, whole or not at all, making the
// directories on its way. It returns the new file.
func (t *Tree) Write(p string, r io.Reader, o WriteOptions) (Entry, error) {
	p, err := Clean(p)
	if err != nil {
		return Entry{}, err
	}
	if p == "." {
		return Entry{}, ErrIsDir
	}
	if o.Mode&^fs.ModePerm != 0 {
		return Entry{}, fmt.Errorf("%w: mode %v: only permission bits", ErrInvalidPath, o.Mode)
	}
	var e Entry
	err = t.run(func(root *os.Root) error {
		if err := root.MkdirAll(path.Dir(p), 0o755); err != nil {
			return err
		}
		// The directory is resolved once: the temporary file is made,
		// renamed and on failure removed there, whatever a program
		// renames or swaps on its way meanwhile.
		dir, err := root.OpenRoot(path.Dir(p))
		if err != nil {
			return err
		}
		defer dir.Close()
		tmp, f, err := createTemp(dir, ".")
		if err != nil {
			return err
		}
		n, err := copyInto(f, r)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			e, err = t.replace(dir, tmp, path.Base(p), o)
		}
		if err != nil {
			dir.Remove(tmp)
			if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
				return &NoSpaceError{Written: n, Err: err}
			}
		}
		return err
	})
	return e, translate(err)
}

// replace gives the written temporary file its mode and renames it over
// p, if the write's check passes.
func (t *Tree) replace(root *os.Root, tmp, p string, o WriteOptions) (Entry, error) {
	var old *Entry
	switch cur, err := stat(root, p); {
	case err == nil && cur.Type == TypeDir:
		return Entry{}, ErrIsDir
	case err == nil:
		old = &cur
	case !errors.Is(err, fs.ErrNotExist):
		return Entry{}, err
	}
	mode := o.Mode
	if mode == 0 {
		mode = 0o644
		if old != nil && old.Type == TypeFile {
			mode = old.Mode
		}
	}
	if o.Check != nil {
		if err := o.Check(old); err != nil {
			return Entry{}, err
		}
	}
	if err := root.Chmod(tmp, mode); err != nil {
		return Entry{}, err
	}
	if err := root.Rename(tmp, p); err != nil {
		return Entry{}, err
	}
	return stat(root, p)
}

// Mkdir makes the directory at p and those on its way.
func (t *Tree) Mkdir(p string) (Entry, error) {
	p, err := Clean(p)
	if err != nil {
		return Entry{}, err
	}
	var e Entry
	err = t.run(func(r *os.Root) error {
		if err := r.MkdirAll(p, 0o755); err != nil {
			return err
		}
		e, err = stat(r, p)
		return err
	})
	return e, translate(err)
}

// Remove removes the file or empty directory at p, or with recursive
// the tree below it too. The tree's root is never removed.
func (t *Tree) Remove(p string, recursive bool) error {
	p, err := Clean(p)
	if err != nil {
		return err
	}
	if p == "." {
		return fmt.Errorf("%w: the workspace itself", ErrInvalidPath)
	}
	return translate(t.run(func(r *os.Root) error {
		if _, err := r.Lstat(p); err != nil {
			return err
		}
		if recursive {
			return r.RemoveAll(p)
		}
		return r.Remove(p)
	}))
}

// Move renames from to to, replacing a file there (rename(2)); the
// directories on to's way are made.
func (t *Tree) Move(from, to string) (Entry, error) {
	from, err := Clean(from)
	if err != nil {
		return Entry{}, err
	}
	if to, err = Clean(to); err != nil {
		return Entry{}, err
	}
	if from == "." || to == "." {
		return Entry{}, fmt.Errorf("%w: the workspace itself", ErrInvalidPath)
	}
	var e Entry
	err = t.run(func(r *os.Root) error {
		if _, err := r.Lstat(from); err != nil {
			return err
		}
		if err := r.MkdirAll(path.Dir(to), 0o755); err != nil {
			return err
		}
		if err := r.Rename(from, to); err != nil {
			return err
		}
		e, err = stat(r, to)
		return err
	})
	return e, translate(err)
}

// translate names the errors callers tell apart.
func translate(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, syscall.ENOTEMPTY):
		return fmt.Errorf("%w: %w", ErrNotEmpty, err)
	case errors.Is(err, syscall.ENOTDIR):
		return fmt.Errorf("%w: %w", ErrNotDir, err)
	case errors.Is(err, syscall.EISDIR):
		return fmt.Errorf("%w: %w", ErrIsDir, err)
	case errors.Is(err, syscall.ENAMETOOLONG):
		return fmt.Errorf("%w: %w", ErrInvalidPath, err)
	case strings.Contains(err.Error(), "path escapes from parent"):
		return fmt.Errorf("%w: it leads out of the workspace: %w", ErrPermission, err)
	}
	return err
}

// TarOut writes the tree below the directory at p as a tar stream
// (Archive), as the tree's user.
func (t *Tree) TarOut(p string, w io.Writer) (skipped int, err error) {
	err = t.run(func(r *os.Root) error {
		skipped, err = Archive(r, p, w)
		return err
	})
	return skipped, translate(err)
}

// TarIn extracts a tar stream into the directory at p (Extract), as the
// tree's user; a workspace with no room left is a NoSpaceError.
func (t *Tree) TarIn(p string, r io.Reader) (written int64, err error) {
	err = t.run(func(root *os.Root) error {
		written, err = Extract(root, p, r)
		if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
			return &NoSpaceError{Written: written, Err: err}
		}
		return err
	})
	return written, translate(err)
}

// uploadPrefix starts the names of resumable uploads' files.
const uploadPrefix = ".termgate-upload-"

// uploadStale is how old an upload's file may grow without a change
// before StartUpload in its directory removes it.
const uploadStale = 24 * time.Hour

// ErrUploadOffset refuses bytes for an upload at an offset other than
// the one it reached (UploadOffsetError has it).
var ErrUploadOffset = errors.New("files: not the upload's offset")

// UploadOffsetError says where an upload is.
type UploadOffsetError struct{ Offset int64 }

func (e *UploadOffsetError) Error() string {
	return fmt.Sprintf("files: the upload is at offset %d", e.Offset)
}

func (e *UploadOffsetError) Unwrap() error { return ErrUploadOffset }

// ErrUploadBusy refuses to tell or add to an upload while a request is
// still adding to it (a client that lost that request's connection
// asks again shortly: the server may still be reading what was sent).
var ErrUploadBusy = errors.New("files: an earlier request is still adding to the upload")

// lockUpload takes f's lock, exclusive or shared, or fails with
// ErrUploadBusy; closing f lets it go.
func lockUpload(f *os.File, exclusive bool) error {
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return ErrUploadBusy
	}
	return err
}

// upload resolves a resumable upload of the file at p: its directory,
// opened, and its file's name there.
func uploadName(p, id string) (dir, name string, err error) {
	p, err = Clean(p)
	if err != nil {
		return "", "", err
	}
	if p == "." {
		return "", "", ErrIsDir
	}
	if len(id) != 32 || strings.Trim(id, "0123456789abcdef") != "" {
		return "", "", fmt.Errorf("%w: not an upload id", ErrNotFound)
	}
	return path.Dir(p), uploadPrefix + id + "-" + path.Base(p), nil
}

// StartUpload begins a resumable upload of the file at p (its
// directories made) and returns its id. Its bytes gather in a file of
// the directory, hidden by its name, until FinishUpload; uploads left
// there a day without a change are removed by the next start in it.
func (t *Tree) StartUpload(p string) (string, error) {
	var b [16]byte
	rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	dirPath, name, err := uploadName(p, id)
	if err != nil {
		return "", err
	}
	return id, translate(t.run(func(root *os.Root) error {
		if err := root.MkdirAll(dirPath, 0o755); err != nil {
			return err
		}
		dir, err := root.OpenRoot(dirPath)
		if err != nil {
			return err
		}
		defer dir.Close()
		sweepUploads(dir)
		f, err := dir.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		return f.Close()
	}))
}

// sweepUploads removes the stale uploads of dir.
func sweepUploads(dir *os.Root) {
	d, err := dir.Open(".")
	if err != nil {
		return
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	for _, n := range names {
		if !strings.HasPrefix(n, uploadPrefix) {
			continue
		}
		if fi, err := dir.Lstat(n); err == nil && fi.Mode().IsRegular() && time.Since(fi.ModTime()) > uploadStale {
			dir.Remove(n)
		}
	}
}

// inUpload runs f with the upload's directory and file name, once its
// file exists.
func (t *Tree) inUpload(p, id string, f func(dir *os.Root, name string) error) error {
	dirPath, name, err := uploadName(p, id)
	if err != nil {
		return err
	}
	return translate(t.run(func(root *os.Root) error {
		dir, err := root.OpenRoot(dirPath)
		if err != nil {
			return err
		}
		defer dir.Close()
		if fi, err := dir.Lstat(name); err != nil || !fi.Mode().IsRegular() {
			return fmt.Errorf("%w: no such upload", ErrNotFound)
		}
		return f(dir, name)
	}))
}

// UploadOffset is how many bytes an upload holds.
func (t *Tree) UploadOffset(p, id string) (int64, error) {
	var n int64
	err := t.inUpload(p, id, func(dir *os.Root, name string) error {
		f, err := dir.Open(name)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := lockUpload(f, false); err != nil {
			return err
		}
		fi, err := f.Stat()
		if err == nil {
			n = fi.Size()
		}
		return err
	})
	return n, err
}

// Append adds r's bytes to an upload at offset, which must be the
// offset it reached (UploadOffsetError otherwise). What it read is kept
// when r fails (the client resumes from the new offset); when the
// workspace is full, none of it is (NoSpaceError). It returns the new
// offset.
func (t *Tree) Append(p, id string, offset int64, r io.Reader) (int64, error) {
	var end int64
	err := t.inUpload(p, id, func(dir *os.Root, name string) error {
		f, err := dir.OpenFile(name, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := lockUpload(f, true); err != nil {
			return err
		}
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		if end = fi.Size(); end != offset {
			return &UploadOffsetError{end}
		}
		if _, err := f.Seek(offset, io.SeekStart); err != nil {
			return err
		}
		n, err := copyInto(f, r)
		end += n
		if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
			f.Truncate(offset)
			end = offset
			return &NoSpaceError{Written: n, Err: err}
		}
		return err
	})
	return end, err
}

// FinishUpload renames an upload's file into place at p, as Write does
// with a whole body.
func (t *Tree) FinishUpload(p, id string, o WriteOptions) (Entry, error) {
	if o.Mode&^fs.ModePerm != 0 {
		return Entry{}, fmt.Errorf("%w: mode %v: only permission bits", ErrInvalidPath, o.Mode)
	}
	var e Entry
	err := t.inUpload(p, id, func(dir *os.Root, name string) error {
		var err error
		e, err = t.replace(dir, name, path.Base(path.Clean("/"+p)), o)
		return err
	})
	return e, err
}

// AbortUpload removes an upload and its bytes.
func (t *Tree) AbortUpload(p, id string) error {
	return t.inUpload(p, id, func(dir *os.Root, name string) error { return dir.Remove(name) })
}
