package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/termgate/termgate/session/execid"
)

// IdentityFile is the file in the state directory that holds the node's
// name and epoch.
const IdentityFile = "node.json"

// maxIdentityBytes bounds what LoadIdentity reads: the file is ~50 bytes.
const maxIdentityBytes = 4 << 10

// ErrOtherNode is LoadIdentity's error for a state directory another node
// made: a volume mounted on the wrong node.
var ErrOtherNode = errors.New("cluster: the state directory belongs to another node")

// identity is node.json's content.
type identity struct {
	Node  string `json:"node"`
	Epoch string `json:"epoch"`
}

// LoadIdentity returns node's epoch, kept in stateDir's node.json (mode
// 0600), which it creates with a fresh epoch on a node's first start. It
// refuses a file naming another node (ErrOtherNode) and a malformed one,
// which it never overwrites. An empty stateDir (--state-dir none) gets a
// fresh epoch each call: without state, every start is a new epoch.
func LoadIdentity(stateDir, node string) (epoch string, err error) {
	if !execid.ValidNode(node) {
		return "", fmt.Errorf("cluster: node name %q: want an RFC 1123 label (lower-case letters, digits, inner hyphens; at most 63)", node)
	}
	if stateDir == "" {
		return execid.NewEpoch(), nil
	}
	path := filepath.Join(stateDir, IdentityFile)
	id, err := readIdentity(path)
	if errors.Is(err, fs.ErrNotExist) {
		id, err = createIdentity(stateDir, path, node)
	}
	if err != nil {
		return "", err
	}
	if id.Node != node {
		return "", fmt.Errorf("%w: %s names node %q, this is %q; mount this node's own state directory, or remove the file if the directory is really this node's", ErrOtherNode, path, id.Node, node)
	}
	return id.Epoch, nil
}

// readIdentity reads and checks an identity file, never through a
// symbolic link.
func readIdentity(path string) (identity, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|noFollow, 0)
	if err != nil {
		return identity{}, fmt.Errorf("cluster: read node identity: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxIdentityBytes+1))
	if err != nil {
		return identity{}, fmt.Errorf("cluster: read node identity %s: %w", path, err)
	}
	if len(b) > maxIdentityBytes {
		return identity{}, fmt.Errorf("cluster: node identity %s: larger than %d bytes", path, maxIdentityBytes)
	}
	var id identity
	if err := json.Unmarshal(b, &id); err != nil {
		return identity{}, fmt.Errorf("cluster: node identity %s: %w", path, err)
	}
	if !execid.ValidNode(id.Node) || !execid.ValidEpoch(id.Epoch) {
		return identity{}, fmt.Errorf("cluster: node identity %s: malformed node %q or epoch %q", path, id.Node, id.Epoch)
	}
	return id, nil
}

// createIdentity writes a fresh identity durably: a temporary file,
// synced, then linked into place, so two starts racing on one directory
// agree on one epoch (the loser reads the winner's).
func createIdentity(dir, path, node string) (identity, error) {
	id := identity{Node: node, Epoch: execid.NewEpoch()}
	b, err := json.Marshal(id)
	if err != nil {
		return identity{}, fmt.Errorf("cluster: write node identity: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".node-*.json")
	if err != nil {
		return identity{}, fmt.Errorf("cluster: write node identity: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(append(b, '\n'))
	if err == nil {
		err = tmp.Chmod(0o600)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return identity{}, fmt.Errorf("cluster: write node identity: %w", err)
	}
	if err := os.Link(tmp.Name(), path); errors.Is(err, fs.ErrExist) {
		return readIdentity(path)
	} else if err != nil {
		return identity{}, fmt.Errorf("cluster: write node identity: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return id, nil
}
