package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox"
)

// BenchmarkFiles moves 1 GiB into a workspace and out of it through the
// files API, against cp(1) of the same file between two places of the
// same filesystem, and reports how far the gateway's memory (heap and
// stacks) rose above idle during each transfer.
func BenchmarkFiles(b *testing.B) {
	const size = 1 << 30
	// A workspace as serve makes it by default: an ext4 image of its own
	// (the quota), where cp writes too.
	root := b.TempDir()
	ws, err := sandbox.OpenWorkspaces(sandbox.WorkspacesConfig{Root: root, Bytes: 4 << 30, Inodes: 1 << 16})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ws.Close() })
	e := newEnv(b, func(c *Config) { c.Workspaces, c.WorkspaceRoot = ws, root })
	tok := e.token(b, "acme", ScopeFilesRead, ScopeFilesWrite)
	w, err := e.srv.cfg.Workspaces.Prepare("acme")
	if err != nil {
		b.Fatal(err)
	}
	local := filepath.Join(b.TempDir(), "src")
	if err := writeZeros(local, size); err != nil {
		b.Fatal(err)
	}
	b.Run("local-cp", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			b.StopTimer()
			settle() // what earlier writes left dirty is no part of this one
			b.StartTimer()
			if out, err := exec.Command("cp", local, filepath.Join(w.Path, "cp-copy")).CombinedOutput(); err != nil {
				b.Fatalf("cp: %v %s", err, out)
			}
		}
	})
	do := func(b *testing.B, method string, body func() io.Reader) {
		b.SetBytes(size)
		var peak uint64
		for b.Loop() {
			b.StopTimer()
			settle()
			b.StartTimer()
			stop := watchMemory(&peak)
			req, _ := http.NewRequestWithContext(context.Background(), method, e.http.URL+"/v1/files/big.bin", body())
			req.Header.Set("Authorization", "Bearer "+tok)
			if method == http.MethodPut {
				req.ContentLength = size
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			n, _ := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			stop()
			if resp.StatusCode/100 != 2 || method == http.MethodGet && n != size {
				b.Fatalf("%s: %s, %d bytes", method, resp.Status, n)
			}
		}
		b.ReportMetric(float64(peak)/(1<<20), "MiB-above-idle")
	}
	b.Run("upload", func(b *testing.B) {
		do(b, http.MethodPut, func() io.Reader { f, _ := os.Open(local); return f })
	})
	b.Run("download", func(b *testing.B) { do(b, http.MethodGet, func() io.Reader { return nil }) })
}

// writeZeros writes a file of n bytes of zeros (not sparse).
func writeZeros(name string, n int64) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	for left := n; left > 0; left -= int64(len(buf)) {
		if _, err := f.Write(buf[:min(left, int64(len(buf)))]); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

// watchMemory samples the process's heap and stacks in use every 5 ms
// until stop, keeping in peak the most they rose above their level at
// the start (after a collection), if more than peak holds.
func watchMemory(peak *uint64) (stop func()) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	idle := ms.HeapInuse + ms.StackInuse
	var done atomic.Bool
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for !done.Load() {
			runtime.ReadMemStats(&ms)
			if in := ms.HeapInuse + ms.StackInuse; in > idle && in-idle > *peak {
				*peak = in - idle
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return func() { done.Store(true); <-finished }
}

// BenchmarkFilesTree moves a tree of 10,000 small files in and out as a
// tar stream, against tar(1) doing the same on this machine.
func BenchmarkFilesTree(b *testing.B) {
	e := newEnv(b, nil)
	tok := e.token(b, "acme", ScopeFilesRead, ScopeFilesWrite)
	src := filepath.Join(b.TempDir(), "tree")
	for d := range 100 {
		os.MkdirAll(filepath.Join(src, fmt.Sprintf("d%03d", d)), 0o755)
		for f := range 100 {
			os.WriteFile(filepath.Join(src, fmt.Sprintf("d%03d/f%03d", d, f)), []byte(fmt.Sprint(d*100+f)), 0o644)
		}
	}
	archive := filepath.Join(b.TempDir(), "tree.tar")
	if out, err := exec.Command("tar", "-cf", archive, "-C", src, ".").CombinedOutput(); err != nil {
		b.Fatalf("tar: %v %s", err, out)
	}
	scratch := b.TempDir()
	b.Run("local-tar-in", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			dst := filepath.Join(scratch, fmt.Sprint("x", i))
			os.Mkdir(dst, 0o755)
			if out, err := exec.Command("tar", "-xf", archive, "-C", dst).CombinedOutput(); err != nil {
				b.Fatalf("tar -x: %v %s", err, out)
			}
		}
	})
	b.Run("local-tar-out", func(b *testing.B) {
		for b.Loop() {
			// To a pipe read here: GNU tar reads no file at all when it
			// writes to /dev/null.
			cmd := exec.Command("tar", "-cf", "-", "-C", src, ".")
			cmd.Stdout = io.Discard
			if err := cmd.Run(); err != nil {
				b.Fatalf("tar -c: %v", err)
			}
		}
	})
	call := func(b *testing.B, method, path string, body io.Reader) {
		req, _ := http.NewRequestWithContext(context.Background(), method, e.http.URL+"/v1/files/"+path, body)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("%s %s: %s", method, path, resp.Status)
		}
	}
	b.Run("tar-in", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			f, _ := os.Open(archive)
			call(b, http.MethodPut, fmt.Sprintf("in%d/?format=tar", i), f)
			f.Close()
		}
	})
	b.Run("tar-out", func(b *testing.B) {
		for b.Loop() {
			call(b, http.MethodGet, "in0/?format=tar", nil)
		}
	})
}

// settle writes back every dirty page, twice: the workspace image's
// pages land in its backing file's, which the first sync may already
// have passed.
func settle() {
	syscall.Sync()
	syscall.Sync()
}
