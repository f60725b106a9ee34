//go:build linux

package sandbox

import (
	"os"
	"os/exec"
	"testing"

	"github.com/termgate/termgate/sandbox/internal/sandboxinit"
	"golang.org/x/sys/unix"
)

// BenchmarkInitExec measures the init alone, outside any sandbox: this
// binary run as the init, reading its configuration and exec'ing
// /bin/true ("init"), beside /bin/true exec'd directly ("direct"). The
// difference is what every sandbox start pays for the init.
func BenchmarkInitExec(b *testing.B) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	cfg, err := sandboxinit.Config{Env: []string{"PATH=/usr/bin:/bin"}, Cwd: "/"}.Encode()
	if err != nil {
		b.Fatal(err)
	}
	b.Run("init", func(b *testing.B) {
		for b.Loop() {
			runInit(b, exe, cfg)
		}
	})
	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			if err := exec.Command("/bin/true").Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// runInit runs exe as the init of /bin/true with cfg waiting on its
// control socket.
func runInit(b *testing.B, exe string, cfg []byte) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "ctl"), os.NewFile(uintptr(fds[1]), "ctl-child")
	defer ours.Close()
	if _, err := ours.Write(cfg); err != nil {
		b.Fatal(err)
	}
	cmd := &exec.Cmd{Path: exe, Args: []string{sandboxinit.Path, "/bin/true"}, Env: []string{"GOMAXPROCS=1"}, ExtraFiles: []*os.File{theirs}}
	err = cmd.Run()
	theirs.Close()
	if err != nil {
		b.Fatal(err)
	}
}
