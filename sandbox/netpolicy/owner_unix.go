//go:build unix

package netpolicy

import (
	"fmt"
	"os"
	"syscall"
)

// checkOwner refuses a file that another user than this one or root owns.
func checkOwner(fi os.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("cannot tell its owner")
	}
	if me := os.Geteuid(); int(st.Uid) != me && st.Uid != 0 {
		return fmt.Errorf("owned by uid %d, not uid %d (this process) or root", st.Uid, me)
	}
	return nil
}
