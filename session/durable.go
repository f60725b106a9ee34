package session

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/termgate/termgate/replay"
	"github.com/termgate/termgate/sandbox"
	"golang.org/x/sys/unix"
)

// Durable executions. With Config.StateDir, every execution keeps its
// state in a directory of its own, D/executions/<key>/:
//
//   - ring: the replay ring's memory, a shared mapping of the file
//     (replay.Config.Memory), so every event is in the file the moment it
//     is appended, and a supervisor killed at any instruction leaves a
//     ring that replay.Recover rebuilds;
//   - input: the input accepted and not yet written to the program, and
//     both offsets (inputlog.go), so input acknowledged to a client is
//     never lost and never written twice;
//   - record.json: who owns it, its spec, and once it ended its result and
//     when its retention ends, replaced atomically (write, then rename).
//
// Every file there is opened relative to a descriptor of its directory
// and never through a symbolic link (sandbox.OpenStateFile): a link
// planted in the state directory is refused, not followed.
//
// A supervisor started on the same directory (Restore) takes over: live
// executions from the launcher (the sandbox's keeper holds them while no
// supervisor runs), ended ones with their results until their retention
// ends. What it cannot bring back is answered ErrGone, never ErrNotFound:
// a record is kept as a tombstone (record.json alone, under 4 KiB) for
// TombstoneRetention.

// TombstoneRetention is how long a restarted supervisor answers ErrGone
// for an execution it found ended or lost and could not serve.
const TombstoneRetention = 24 * time.Hour

// maxTombstones bounds the tombstones a supervisor keeps; the oldest go
// first.
const maxTombstones = 4096

// recordVersion is the layout of record.json; a supervisor refuses a
// state directory with newer ones (ErrStateVersion).
const recordVersion = 1

// record is record.json.
type record struct {
	Version     int    `json:"version"`
	Owner       string `json:"owner"`
	ID          string `json:"id"`
	Incarnation string `json:"incarnation"`
	Fingerprint string `json:"fingerprint"`
	Spec        Spec   `json:"spec"`
	// Ring is the ring's effective bounds, which Recover must be given
	// exactly, whatever the defaults of the binary that reads it.
	Ring    replay.Config `json:"ring"`
	Started time.Time     `json:"started"`
	Result  *Result       `json:"result,omitempty"`
	Expires time.Time     `json:"expires,omitzero"` // retention end, once ended
	Gone    time.Time     `json:"gone,omitzero"`    // a tombstone since then
}

// store is the state directory.
type store struct{ dir string }

// executionsDir holds one directory per execution.
func (st *store) executionsDir() string { return filepath.Join(st.dir, "executions") }

// prepare makes the state directory, private to this user, refusing one
// that is not safe to keep state in (sandbox.CheckStateDir).
func (st *store) prepare() error {
	for _, d := range []string{st.dir, st.executionsDir()} {
		if _, err := sandbox.CheckStateDir(d, true); err != nil {
			return fmt.Errorf("session: state directory: %w", err)
		}
	}
	return nil
}

// dirKey names an execution's directory and its process in the sandbox's
// keeper: a hash, so neither owner nor ID needs to be a safe file name.
func dirKey(k key) string {
	h := sha256.Sum256([]byte(k.owner + "\x00" + k.id))
	return "x" + hex.EncodeToString(h[:16])
}

func (st *store) path(k key) string { return filepath.Join(st.executionsDir(), dirKey(k)) }

// create makes the directory of a new execution, replacing what an
// earlier execution of the same key may have left.
func (st *store) create(k key) (string, error) {
	dir := st.path(k)
	if err := os.RemoveAll(dir); err != nil {
		return "", fmt.Errorf("session: state of %s: %w", k.id, err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", fmt.Errorf("session: state of %s: %w", k.id, err)
	}
	return dir, nil
}

// writeRecord writes dir's record.json. A start's first record (first)
// is written into the fresh directory in place: one file, no rename. It
// is written before the process is launched, so a start killed before it
// ended leaves no record, or a partial one that Restore drops with the
// directory, and no process. Every later record replaces it atomically
// (write, then rename).
func writeRecord(dir string, rec *record, first bool) error {
	rec.Version = recordVersion
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("session: encode record: %w", err)
	}
	if first {
		if err := writeNew(dir, "record.json", b); err != nil {
			return fmt.Errorf("session: write record: %w", err)
		}
		return nil
	}
	if err := replaceFile(dir, "record.json", b); err != nil {
		return fmt.Errorf("session: write record: %w", err)
	}
	return nil
}

// writeNew writes b to dir/name, which must not exist.
func writeNew(dir, name string, b []byte) error {
	f, err := sandbox.OpenStateFile(dir, name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	return errors.Join(err, f.Close())
}

// replaceFile replaces dir/name with b atomically: b is written to a
// fresh name.tmp (whatever was there removed, never written through),
// then renamed over name.
func replaceFile(dir, name string, b []byte) error {
	tmp := name + ".tmp"
	if err := os.Remove(filepath.Join(dir, tmp)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := writeNew(dir, tmp, b); err != nil {
		return err
	}
	return os.Rename(filepath.Join(dir, tmp), filepath.Join(dir, name))
}

// readFile reads dir/name, at most limit bytes of it (-1: all of it).
func readFile(dir, name string, limit int64) ([]byte, error) {
	f, err := sandbox.OpenStateFile(dir, name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if limit < 0 {
		return io.ReadAll(f)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err == nil && int64(len(b)) > limit {
		err = fmt.Errorf("larger than %d bytes", limit)
	}
	return b, err
}

// maxRecord bounds a record.json read back: a spec is bounded by the
// policy's limits (64 KiB of environment, paths, binds) far below it.
const maxRecord = 1 << 20

func readRecord(dir string) (*record, error) {
	b, err := readFile(dir, "record.json", maxRecord)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	var rec record
	if err == nil {
		err = json.Unmarshal(b, &rec)
	}
	if err != nil {
		return nil, fmt.Errorf("session: read record in %s: %w", dir, err)
	}
	if rec.Version > recordVersion {
		return nil, fmt.Errorf("%w: record in %s has version %d, this termgate reads %d", ErrStateVersion, dir, rec.Version, recordVersion)
	}
	if rec.Version != recordVersion {
		return nil, fmt.Errorf("session: record in %s has version %d, this termgate reads %d", dir, rec.Version, recordVersion)
	}
	return &rec, nil
}

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

// ringBounds is cfg with the defaults filled in.
func ringBounds(cfg replay.Config) replay.Config {
	cfg.MaxBytes = cmp.Or(max(cfg.MaxBytes, 0), replay.DefaultMaxBytes)
	cfg.MaxEvents = cmp.Or(max(cfg.MaxEvents, 0), replay.DefaultMaxEvents)
	return cfg
}

// durableRing returns the ring of a new execution in dir.
func durableRing(dir string, cfg replay.Config) (*replay.Ring, error) {
	mem, err := mapFile(dir, "ring", replay.MemorySize(cfg), true)
	if err != nil {
		return nil, err
	}
	cfg.Memory = mem
	r := replay.New(cfg)
	unmapWith(r, mem)
	return r, nil
}

// recoverRing returns the ring an earlier supervisor left in dir.
func recoverRing(dir string, cfg replay.Config) (*replay.Ring, error) {
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

// screenFile keeps a terminal's screen state across a planned restart:
// Detach writes the emulator's snapshot, which stands for every event up
// to Seq (the newest evicted one), and the next supervisor seeds a fresh
// emulator with it. After a crash there is none; a ring that never
// evicted needs none.
type screenFile struct {
	Seq        uint64 `json:"seq"`
	Rows, Cols int
	Data       []byte `json:"data"`
}

// saveScreen writes e's screen state, if it has one worth keeping.
func (e *execution) saveScreen() {
	if e.dir == "" || e.screen == nil {
		return
	}
	first, _ := e.ring.Bounds()
	if first <= 1 {
		return // nothing evicted: a fresh emulator is exact
	}
	data, rows, cols, ok := e.screen.snapshot()
	if !ok {
		return // the next supervisor's readers behind the ring get a gap
	}
	b, err := json.Marshal(screenFile{Seq: first - 1, Rows: rows, Cols: cols, Data: data})
	if err == nil {
		err = replaceFile(e.dir, "screen", b)
	}
	if err != nil {
		e.s.log.Warn("cannot keep the terminal's screen state", "execution", e.key.id, "err", err)
	}
}

// restoreScreen gives a restored terminal its screen state: a fresh
// emulator when the ring never evicted, one seeded with the screen Detach
// kept when it stands for exactly the evicted events, else none (a reader
// behind the ring gets a gap).
func (e *execution) restoreScreen() {
	tty := e.spec.Policy.TTY
	if tty == nil || newTerminal == nil || e.s.cfg.NoScreenState {
		return
	}
	first, _ := e.ring.Bounds()
	if first <= 1 {
		e.screen = e.s.newScreenState(e, int(tty.Rows), int(tty.Cols))
		e.ring.OnEvict(e.screen.evicted)
		return
	}
	b, err := readFile(e.dir, "screen", -1)
	if err != nil {
		return
	}
	var sf screenFile
	if json.Unmarshal(b, &sf) != nil || sf.Seq != first-1 || sf.Rows <= 0 || sf.Cols <= 0 {
		return
	}
	e.screen = e.s.newScreenState(e, sf.Rows, sf.Cols)
	e.screen.pending = sf.Data
	e.ring.OnEvict(e.screen.evicted)
}
