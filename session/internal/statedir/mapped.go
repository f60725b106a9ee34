package statedir

import (
	"cmp"
	"fmt"
	"os"
	"runtime"

	"github.com/termgate/termgate/replay"
	"github.com/termgate/termgate/sandbox"
	"golang.org/x/sys/unix"
)

// mapFile maps the file name in dir, created with size bytes when create,
// shared, so what is written to the memory is in the file at once. A
// symbolic link there is refused, never mapped.
func mapFile(dir, name string, size int, create bool) ([]byte, error) {
	flags := os.O_RDWR
	if create {
		flags |= os.O_CREATE | os.O_EXCL
	}
	f, err := sandbox.OpenStateFile(dir, name, flags, 0o600)
	if err != nil {
		return nil, fmt.Errorf("session: open %s: %w", name, err)
	}
	defer f.Close()
	if create {
		if err := f.Truncate(int64(size)); err != nil {
			return nil, fmt.Errorf("session: size %s: %w", name, err)
		}
	} else if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() || fi.Size() != int64(size) {
		return nil, fmt.Errorf("session: %s is not a file of %d bytes", name, size)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("session: map %s: %w", name, err)
	}
	// The ring and the input log are written a page at a time, in order,
	// mostly into holes. With the default advice the first touch of a
	// hole reads ahead: it allocates and zeroes a window of page cache the
	// execution may never use, which cost the server about 2 ms per start
	// on ext4 (BenchmarkDurableStorage). Advice only: an error changes
	// nothing but the speed.
	unix.Madvise(mem, unix.MADV_RANDOM)
	return mem, nil
}

// unmapWith releases mem once owner is unreachable: nothing can read the
// memory through it any more.
func unmapWith[T any](owner *T, mem []byte) {
	runtime.AddCleanup(owner, func(m []byte) { unix.Munmap(m) }, mem)
}

// RingBounds is cfg with the defaults filled in: the bounds a record
// keeps.
func RingBounds(cfg replay.Config) replay.Config {
	cfg.MaxBytes = cmp.Or(max(cfg.MaxBytes, 0), replay.DefaultMaxBytes)
	cfg.MaxEvents = cmp.Or(max(cfg.MaxEvents, 0), replay.DefaultMaxEvents)
	return cfg
}

// NewRing returns the ring of a new execution in dir, in its file ring.
func NewRing(dir string, cfg replay.Config) (*replay.Ring, error) {
	mem, err := mapFile(dir, "ring", replay.MemorySize(cfg), true)
	if err != nil {
		return nil, err
	}
	cfg.Memory = mem
	r := replay.New(cfg)
	unmapWith(r, mem)
	return r, nil
}

// RecoverRing returns the ring an earlier supervisor left in dir.
func RecoverRing(dir string, cfg replay.Config) (*replay.Ring, error) {
	mem, err := mapFile(dir, "ring", replay.MemorySize(cfg), false)
	if err != nil {
		return nil, err
	}
	cfg.Memory = mem
	r, err := replay.Recover(cfg)
	if err != nil {
		unix.Munmap(mem)
		return nil, err
	}
	unmapWith(r, mem)
	return r, nil
}
