//go:build linux

package fsid

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestAsMakesFilesTheUsers: a file made in As is the user's; one the
// user may not open is refused (no root's bypass, no root's groups);
// after As the thread is itself again.
func TestAsMakesFilesTheUsers(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root, to become another user")
	}
	dir := t.TempDir()
	os.Chmod(filepath.Dir(dir), 0o711)
	os.Chmod(dir, 0o777)
	secret := filepath.Join(dir, "secret")
	os.WriteFile(secret, []byte("x"), 0o640) // root's, group root
	const uid, gid = 3971234, 3971234
	var st unix.Stat_t
	var openErr error
	err := Run(uid, gid, func() error {
		f, err := os.Create(filepath.Join(dir, "made"))
		if err != nil {
			return err
		}
		f.Close()
		if err := unix.Stat(filepath.Join(dir, "made"), &st); err != nil {
			return err
		}
		_, openErr = os.ReadFile(secret)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if st.Uid != uid || st.Gid != gid {
		t.Errorf("a file made as %d:%d is %d:%d", uid, gid, st.Uid, st.Gid)
	}
	if !errors.Is(openErr, os.ErrPermission) {
		t.Errorf("root's 0640 file read as another user: %v", openErr)
	}
	err = Run(uid, gid, func() error { return errors.New("failed") })
	if err == nil || errors.Is(err, ErrStuck) {
		t.Errorf("f's error: %v", err)
	}
	// The runtime's threads are root's again: a file made now is root's.
	done := make(chan identity, 1)
	go func() { done <- current() }()
	if id := <-done; id.uid != 0 || id.gid != 0 {
		t.Errorf("a thread after As is %d:%d", id.uid, id.gid)
	}
}
