package statedir

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"

	"github.com/termgate/termgate/sandbox"
)

// Store is a state directory.
type Store struct{ dir string }

// Open makes the state directory dir and its executions/, private to this
// user, refusing one that is not safe to keep state in
// (sandbox.CheckStateDir).
func Open(dir string) (*Store, error) {
	st := &Store{dir: dir}
	for _, d := range []string{st.dir, st.ExecutionsDir()} {
		if _, err := sandbox.CheckStateDir(d, true); err != nil {
			return nil, fmt.Errorf("session: state directory: %w", err)
		}
	}
	return st, nil
}

// Dir is the state directory.
func (st *Store) Dir() string { return st.dir }

// ExecutionsDir holds one directory per execution.
func (st *Store) ExecutionsDir() string { return filepath.Join(st.dir, "executions") }

// DirKey names the directory of owner's execution id, and its process in
// the sandbox's keeper: a hash, so neither owner nor ID needs to be a
// safe file name.
func DirKey(owner, id string) string {
	h := sha256.Sum256([]byte(owner + "\x00" + id))
	return "x" + hex.EncodeToString(h[:16])
}

// Path is the directory of owner's execution id.
func (st *Store) Path(owner, id string) string {
	return filepath.Join(st.ExecutionsDir(), DirKey(owner, id))
}

// Create makes the directory of a new execution, replacing what an
// earlier execution of the same owner and ID may have left.
func (st *Store) Create(owner, id string) (string, error) {
	dir := st.Path(owner, id)
	if err := os.RemoveAll(dir); err != nil {
		return "", fmt.Errorf("session: state of %s: %w", id, err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", fmt.Errorf("session: state of %s: %w", id, err)
	}
	return dir, nil
}
