package files

import (
	"archive/tar"
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"
)

func openRoot(t *testing.T) (*os.Root, string) {
	t.Helper()
	dir := t.TempDir()
	r, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r, dir
}

// listTree lists a directory's tree as "path type mode size" lines,
// symlinks with their targets.
func listTree(t *testing.T, dir string) string {
	t.Helper()
	var lines []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		fi, _ := d.Info()
		e := entry(fi)
		rel, _ := filepath.Rel(dir, p)
		line := filepath.ToSlash(rel) + " " + string(e.Type)
		if runtime.GOOS != "windows" {
			line += " " + e.Mode.String()
		}
		if e.Type == TypeFile {
			b, _ := os.ReadFile(p)
			line += " " + string(b)
		}
		if e.Type == TypeSymlink {
			target, _ := os.Readlink(p)
			line += " -> " + target
		}
		lines = append(lines, line)
		return nil
	})
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// TestArchiveExtractRoundTrip: a tree archived and extracted elsewhere
// is the same tree: directories, files with their modes, symlinks.
func TestArchiveExtractRoundTrip(t *testing.T) {
	t.Parallel()
	src, srcDir := openRoot(t)
	src.MkdirAll("top/a/b", 0o755)
	src.WriteFile("top/a/b/f.txt", []byte("deep"), 0o640)
	src.WriteFile("top/x", []byte("exec"), 0o755)
	src.WriteFile("top/a/name\nwith newline", []byte("n"), 0o600)
	src.Mkdir("top/empty", 0o700)
	if runtime.GOOS != "windows" {
		src.Symlink("a/b/f.txt", "top/link")
	}
	var b bytes.Buffer
	if skipped, err := Archive(src, "top", &b); err != nil || skipped != 0 {
		t.Fatalf("Archive: %d skipped, %v", skipped, err)
	}
	dst, dstDir := openRoot(t)
	n, err := Extract(dst, "into/here", &b)
	if err != nil || n != int64(len("deep")+len("exec")+1) {
		t.Fatalf("Extract: %d bytes, %v", n, err)
	}
	if got, want := listTree(t, filepath.Join(dstDir, "into/here")), listTree(t, filepath.Join(srcDir, "top")); got != want {
		t.Errorf("extracted:\n%s\nwant:\n%s", got, want)
	}
}

// tarOf makes a tar stream of the headers, each regular file holding
// "data".
func tarOf(headers ...*tar.Header) *bytes.Buffer {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range headers {
		if h.Typeflag == tar.TypeReg {
			h.Size = 4
		}
		h.ModTime = time.Unix(1e9, 0)
		tw.WriteHeader(h)
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte("data"))
		}
	}
	tw.Close()
	return &b
}

// TestExtractRefuses: names that climb out, devices and fifos, setuid
// bits, files through a symlink out and hard links out are refused,
// and what the stream had made before is removed.
func TestExtractRefuses(t *testing.T) {
	t.Parallel()
	reg := func(name string) *tar.Header { return &tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644} }
	outside := t.TempDir()
	for name, bad := range map[string]*tar.Header{
		"climbs":               reg("../x"),
		"climbs inside":        reg("a/../../x"),
		"device":               {Name: "dev", Typeflag: tar.TypeChar, Mode: 0o644, Devmajor: 1, Devminor: 3},
		"fifo":                 {Name: "fifo", Typeflag: tar.TypeFifo, Mode: 0o644},
		"setuid":               {Name: "su", Typeflag: tar.TypeReg, Mode: 0o4755},
		"through a link out":   reg("out/x"),
		"hard link out":        {Name: "hl", Typeflag: tar.TypeLink, Linkname: "../../etc/passwd"},
		"hard link to nothing": {Name: "hl", Typeflag: tar.TypeLink, Linkname: "missing"},
	} {
		t.Run(name, func(t *testing.T) {
			if runtime.GOOS == "windows" && name == "through a link out" {
				t.Skip("symlinks need privileges on Windows")
			}
			root, dir := openRoot(t)
			headers := []*tar.Header{{Name: "made/", Typeflag: tar.TypeDir, Mode: 0o755}, reg("made/file")}
			if name == "through a link out" {
				headers = append(headers, &tar.Header{Name: "out", Typeflag: tar.TypeSymlink, Linkname: outside})
			}
			_, err := Extract(root, "x", tarOf(append(headers, bad)...))
			if err == nil {
				t.Fatal("extracted")
			}
			if !errors.Is(err, ErrBadArchive) && !strings.Contains(err.Error(), "escapes") {
				t.Errorf("error %v, want a refusal", err)
			}
			if names, _ := os.ReadDir(dir); len(names) != 0 {
				t.Errorf("a refused stream left %v", names)
			}
		})
	}
	if names, _ := os.ReadDir(outside); len(names) != 0 {
		t.Errorf("outside now holds %v", names)
	}
}
