//go:build linux

package files

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"

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
		n, err := io.Copy(f, r)
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
