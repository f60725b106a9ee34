//go:build unix

package auth

import (
	"fmt"
	"os"
	"syscall"
)

// checkSecretFile refuses a secret that is not a regular file, that the
// group or others may read or write, or that a user other than this one
// (or root) owns. The error says which and how to fix it.
func checkSecretFile(path string, fi os.FileInfo) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("auth: HS256 secret %s: not a regular file (%v)", path, fi.Mode().Type())
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("auth: HS256 secret %s: mode %04o lets the group or others read or write it; run chmod 600 %s", path, perm, path)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("auth: HS256 secret %s: cannot tell its owner", path)
	}
	if me := os.Geteuid(); int(st.Uid) != me && st.Uid != 0 {
		return fmt.Errorf("auth: HS256 secret %s: owned by uid %d, not uid %d (termgate) or root", path, st.Uid, me)
	}
	return nil
}
