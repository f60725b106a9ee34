//go:build linux

package fdio

import (
	"os"
	"sync"
	"testing"
)

// TestReadReady: bytes that come later are read into the buffer at the
// offset asked, the writer's end reads as 0 bytes with no error, and a
// closed descriptor fails with no buffer kept.
func TestReadReady(t *testing.T) {
	t.Parallel()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rc, err := r.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	pool := &sync.Pool{New: func() any { b := make([]byte, 16); return &b }}
	go w.Write([]byte("hello"))
	buf, n, err := ReadReady(rc, pool, 3, 16)
	if err != nil || n != 5 || string((*buf)[3:3+n]) != "hello" {
		t.Fatalf("ReadReady: %d, %v", n, err)
	}
	pool.Put(buf)
	w.Close()
	if buf, n, err := ReadReady(rc, pool, 0, 16); err != nil || n != 0 || buf == nil {
		t.Errorf("at the writer's end: %v, %d, %v; want a buffer, 0 and no error", buf, n, err)
	}
	r.Close()
	if buf, _, err := ReadReady(rc, pool, 0, 16); err == nil || buf != nil {
		t.Errorf("closed: %v, %v; want an error and no buffer", buf, err)
	}
}
