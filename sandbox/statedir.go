//go:build linux

package sandbox

import (
	"os"

	"github.com/termgate/termgate/sandbox/internal/keeper"
)

// ErrStateDir reports a state directory that is not safe to keep state
// in: its error says why (CheckStateDir).
var ErrStateDir = keeper.ErrDir

// CheckStateDir returns dir made absolute once it is safe for
// Config.StateDir: a real directory (not a symbolic link) owned by the
// effective uid with mode 0700, in a parent owned by root or that uid
// which others may not write unless it is sticky. Nobody else can then
// reach the state, nor swap a name in it for a link. With create it makes
// dir (0700) when it does not exist, after checking the parent, and an
// empty one of ours with a wider mode (a fresh volume's mount point,
// such as a Kubernetes emptyDir) 0700. The
// error wraps ErrStateDir and names the reason. NewLauncher and
// ServeKeeper check the same before any use; call it where the directory
// is chosen, to refuse it before anything else reads or writes there.
func CheckStateDir(dir string, create bool) (string, error) { return keeper.CheckDir(dir, create) }

// OpenStateFile opens name in dir, a directory of the state, relative to
// a descriptor of dir and following a symbolic link at neither
// (O_NOFOLLOW): a link planted there is refused, never followed.
func OpenStateFile(dir, name string, flag int, perm os.FileMode) (*os.File, error) {
	return keeper.OpenIn(dir, name, flag, perm)
}
