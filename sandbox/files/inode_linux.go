//go:build linux

package files

import (
	"io/fs"
	"syscall"
)

// inode is fi's inode number.
func inode(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}
