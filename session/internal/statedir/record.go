package statedir

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/termgate/termgate/replay"
	"github.com/termgate/termgate/sandbox"
)

// ErrVersion refuses a state directory that holds records of another
// layout (another termgate's): session.ErrStateVersion.
var ErrVersion = errors.New("session: the state directory was written by another termgate version")

// recordVersion is the layout of record.json; a supervisor refuses a
// state directory with newer ones (ErrVersion).
const recordVersion = 1

// Record is record.json, of a spec of type S and a result of type R.
type Record[S, R any] struct {
	Version     int    `json:"version"`
	Owner       string `json:"owner"`
	ID          string `json:"id"`
	Incarnation string `json:"incarnation"`
	// Fingerprint is the JSON of Spec (Fingerprint digests it), as
	// records have always held it.
	Fingerprint string `json:"fingerprint"`
	Spec        S      `json:"spec"`
	// Ring is the ring's effective bounds, which Recover must be given
	// exactly, whatever the defaults of the binary that reads it.
	Ring    replay.Config `json:"ring"`
	Started time.Time     `json:"started"`
	Result  *R            `json:"result,omitempty"`
	Expires time.Time     `json:"expires,omitzero"` // retention end, once ended
	Gone    time.Time     `json:"gone,omitzero"`    // a tombstone since then
	// Network is the network policy in force when it was changed since
	// the start (Spec holds the first).
	Network string `json:"network,omitempty"`
}

// Fingerprint identifies a normalized spec: a start of an ID that is
// known must bring the same one. It is a digest of the spec's JSON, not
// the JSON itself (about 700 bytes), which every execution would keep
// for its life beside the spec. Records hold the JSON, as they always
// have, so that a termgate of either kind reads the other's.
type Fingerprint [sha256.Size]byte

// FingerprintOf is the fingerprint of spec's JSON.
func FingerprintOf(specJSON []byte) Fingerprint { return sha256.Sum256(specJSON) }

// SpecFingerprint is the fingerprint the record holds.
func (r *Record[S, R]) SpecFingerprint() Fingerprint {
	return FingerprintOf([]byte(r.Fingerprint))
}

// WriteRecord writes dir's record.json. A start's first record (first)
// is written into the fresh directory in place: one file, no rename. It
// is written before the process is launched, so a start killed before it
// ended leaves no record, or a partial one that Restore drops with the
// directory, and no process. Every later record replaces it atomically
// (write, then rename).
func WriteRecord[S, R any](dir string, rec *Record[S, R], first bool) error {
	rec.Version = recordVersion
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("session: encode record: %w", err)
	}
	if first {
		err = writeNew(dir, "record.json", b)
	} else {
		err = replaceFile(dir, "record.json", b)
	}
	if err != nil {
		return fmt.Errorf("session: write record: %w", err)
	}
	return nil
}

// maxRecord bounds a record.json read back: a spec is bounded by the
// policy's limits (64 KiB of environment, paths, binds) far below it.
const maxRecord = 1 << 20

// ReadRecord reads dir's record.json: an error wrapping fs.ErrNotExist
// when there is none, one wrapping ErrVersion when a newer termgate
// wrote it.
func ReadRecord[S, R any](dir string) (*Record[S, R], error) {
	b, err := readFile(dir, "record.json", maxRecord)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	var rec Record[S, R]
	if err == nil {
		err = json.Unmarshal(b, &rec)
	}
	if err != nil {
		return nil, fmt.Errorf("session: read record in %s: %w", dir, err)
	}
	if rec.Version > recordVersion {
		return nil, fmt.Errorf("%w: record in %s has version %d, this termgate reads %d", ErrVersion, dir, rec.Version, recordVersion)
	}
	if rec.Version != recordVersion {
		return nil, fmt.Errorf("session: record in %s has version %d, this termgate reads %d", dir, rec.Version, recordVersion)
	}
	return &rec, nil
}

// RemoveData removes an execution's ring and input, turning its
// directory into a tombstone once its record says Gone.
func RemoveData(dir string) {
	for _, f := range []string{"ring", "input"} {
		os.Remove(filepath.Join(dir, f))
	}
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
