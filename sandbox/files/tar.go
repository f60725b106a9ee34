package files

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"time"
)

// ErrBadArchive refuses a tar stream, or one of its entries: a name
// that is no path of the tree, a device or fifo, a setuid, setgid or
// sticky bit, a hard link to what it does not hold.
var ErrBadArchive = errors.New("files: a tar entry refused")

// Archive writes the tree below the directory at p of r to w as a tar
// stream: directories, regular files and symlinks, named relative to p;
// other kinds (devices, fifos, sockets) are left out and counted.
func Archive(r *os.Root, p string, w io.Writer) (skipped int, err error) {
	if p, err = Clean(p); err != nil {
		return 0, err
	}
	if fi, err := r.Lstat(p); err != nil {
		return 0, err
	} else if !fi.IsDir() {
		return 0, ErrNotDir
	}
	dir, err := r.OpenRoot(p)
	if err != nil {
		return 0, err
	}
	defer dir.Close()
	a := archiver{tw: tar.NewWriter(w)}
	if err := a.dir(dir, "", 0); err != nil {
		return a.skipped, err
	}
	return a.skipped, a.tw.Close()
}

// archiver is an Archive under way. It walks the tree a directory at a
// time, each opened, and names its entries alone there: a path is
// resolved once, however deep.
type archiver struct {
	tw      *tar.Writer
	skipped int
}

// dir archives the entries of dir, named under prefix, in name order.
func (a *archiver) dir(dir *os.Root, prefix string, depth int) error {
	if depth > MaxDepth {
		return fmt.Errorf("%w: deeper than %d directories", ErrInvalidPath, MaxDepth)
	}
	d, err := dir.Open(".")
	if err != nil {
		return err
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return err
	}
	slices.Sort(names)
	for _, name := range names {
		if err := a.entry(dir, name, prefix+name, depth); err != nil {
			return err
		}
	}
	return nil
}

// entry archives dir's entry name as rel, and what is below it.
func (a *archiver) entry(dir *os.Root, name, rel string, depth int) error {
	fi, err := dir.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // removed meanwhile
	}
	if err != nil {
		return err
	}
	e := entry(fi)
	// Whole seconds: a header's own mtime, where nanoseconds would cost
	// each entry an extended header.
	h := &tar.Header{Name: rel, Mode: int64(e.Mode), ModTime: e.MTime.Truncate(time.Second)}
	switch e.Type {
	case TypeDir:
		h.Typeflag, h.Name = tar.TypeDir, rel+"/"
	case TypeSymlink:
		h.Typeflag = tar.TypeSymlink
		if h.Linkname, err = dir.Readlink(name); err != nil {
			return err
		}
	case TypeFile:
		h.Typeflag, h.Size = tar.TypeReg, e.Size
	default:
		a.skipped++
		return nil
	}
	if err := a.tw.WriteHeader(h); err != nil {
		return err
	}
	switch e.Type {
	case TypeDir:
		sub, err := dir.OpenRoot(name)
		if err != nil {
			return err
		}
		defer sub.Close()
		return a.dir(sub, rel+"/", depth+1)
	case TypeFile:
		f, err := dir.Open(name)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.CopyN(a.tw, f, h.Size) // a file grown since is cut, one shrunk fails
		return err
	}
	return nil
}

// Extract extracts the tar stream r into the directory at p of root
// (made with those on its way): directories, regular files (each whole
// or not at all: written under a temporary name, then renamed), symlinks
// and hard links within the tree. It refuses the stream at the first
// entry it refuses (ErrBadArchive) or cannot write, and then removes
// what it had made; files it had replaced stay replaced. It returns the
// bytes of files it wrote.
func Extract(root *os.Root, p string, r io.Reader) (written int64, err error) {
	if p, err = Clean(p); err != nil {
		return 0, err
	}
	x := extraction{root: root, dir: p}
	err = x.run(tar.NewReader(r))
	x.leave()
	if err != nil {
		x.undo()
	}
	return x.written, err
}

// extraction is a TarIn under way: what it made, to remove on failure.
type extraction struct {
	root    *os.Root
	dir     string
	made    []string // paths made, in order
	written int64
	// in is the directory the last file went to, opened: the files of
	// a directory, which a stream holds together, are made by their
	// names alone
	in     *os.Root
	inPath string
}

// enter returns the directory at p, opened.
func (x *extraction) enter(p string) (*os.Root, error) {
	if x.in != nil && x.inPath == p {
		return x.in, nil
	}
	x.leave()
	in, err := x.root.OpenRoot(p)
	if err != nil {
		return nil, err
	}
	x.in, x.inPath = in, p
	return in, nil
}

func (x *extraction) leave() {
	if x.in != nil {
		x.in.Close()
		x.in = nil
	}
}

func (x *extraction) run(tr *tar.Reader) error {
	if err := x.mkdirAll(x.dir); err != nil {
		return err
	}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: %w", ErrBadArchive, err)
		}
		if err := x.entry(h, tr); err != nil {
			return err
		}
	}
}

// entry extracts one entry.
func (x *extraction) entry(h *tar.Header, r io.Reader) error {
	name, err := Clean(h.Name)
	if err != nil || name == "." && h.Typeflag != tar.TypeDir {
		return fmt.Errorf("%w: %q: not a path in the tree", ErrBadArchive, h.Name)
	}
	if h.Mode&0o7000 != 0 {
		return fmt.Errorf("%w: %q: mode %o: setuid, setgid and sticky bits are refused", ErrBadArchive, h.Name, h.Mode)
	}
	target := path.Join(x.dir, name)
	if dir := path.Dir(target); x.in == nil || x.inPath != dir { // the last file's is there
		if err := x.mkdirAll(dir); err != nil {
			return err
		}
	}
	mode := fs.FileMode(h.Mode).Perm()
	switch h.Typeflag {
	case tar.TypeDir:
		if err := x.mkdirAll(target); err != nil {
			return err
		}
		return x.root.Chmod(target, mode|0o700) // the tenant keeps its way in
	case tar.TypeReg:
		return x.file(target, mode, r, h.Size)
	case tar.TypeSymlink:
		if err := x.root.Symlink(h.Linkname, target); err != nil {
			return err
		}
		x.made = append(x.made, target)
		return nil
	case tar.TypeLink:
		old, err := Clean(h.Linkname)
		if err != nil {
			return fmt.Errorf("%w: %q: a hard link to %q, outside the archive's tree", ErrBadArchive, h.Name, h.Linkname)
		}
		if err := x.root.Link(path.Join(x.dir, old), target); err != nil {
			return fmt.Errorf("%w: %q: a hard link to %q: %w", ErrBadArchive, h.Name, h.Linkname, err)
		}
		x.made = append(x.made, target)
		return nil
	}
	return fmt.Errorf("%w: %q: only directories, files and links are extracted (type %q)", ErrBadArchive, h.Name, h.Typeflag)
}

// file writes a regular file of the archive, whole or not at all.
func (x *extraction) file(target string, mode fs.FileMode, r io.Reader, size int64) error {
	dir, err := x.enter(path.Dir(target))
	if err != nil {
		return err
	}
	name := path.Base(target)
	tmp, f, err := createTemp(dir, ".")
	if err != nil {
		return err
	}
	n, err := io.CopyN(f, r, size)
	x.written += n
	if err == nil {
		err = f.Chmod(mode)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	_, existed := dir.Lstat(name)
	if err == nil {
		err = dir.Rename(tmp, name)
	}
	if err != nil {
		dir.Remove(tmp)
		return err
	}
	if existed != nil {
		x.made = append(x.made, target)
	}
	return nil
}

// mkdirAll makes p and the directories on its way, noting those it
// made.
func (x *extraction) mkdirAll(p string) error {
	var missing []string
	for q := p; q != "."; q = path.Dir(q) {
		if _, err := x.root.Lstat(q); err == nil {
			break
		}
		missing = append(missing, q)
	}
	slices.Reverse(missing)
	for _, q := range missing {
		if err := x.root.Mkdir(q, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		x.made = append(x.made, q)
	}
	return nil
}

// undo removes what the extraction made, the last made first.
func (x *extraction) undo() {
	for _, p := range slices.Backward(x.made) {
		x.root.RemoveAll(p)
	}
}
