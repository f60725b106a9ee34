package session

import (
	"fmt"

	"github.com/termgate/termgate/session/execid"
)

// Execution IDs: their grammar and the random names made for executions
// are session/execid's. What follows names them for the gateway, with the
// errors of this package.

// MaxCanonicalIDBytes is the longest canonical ID (execid.MaxCanonical).
const MaxCanonicalIDBytes = execid.MaxCanonical

// Owner names the node that owns an execution (execid.Owner).
type Owner = execid.Owner

// ValidNodeName reports whether s can name a node (execid.ValidNode).
func ValidNodeName(s string) bool { return execid.ValidNode(s) }

// ValidEpoch reports whether s has an epoch's form (execid.ValidEpoch).
func ValidEpoch(s string) bool { return execid.ValidEpoch(s) }

// NewEpoch returns a random epoch (execid.NewEpoch).
func NewEpoch() string { return execid.NewEpoch() }

// NewKey returns a random key for an execution the client did not name
// (execid.New).
func NewKey() string { return execid.New() }

// CanonicalID returns the ID of the execution key owned by o
// (execid.Canonical). It does not check its parts: ParseID does, where
// IDs come in.
func CanonicalID(o Owner, key string) string { return execid.Canonical(o, key) }

// ParseID splits an execution ID. A canonical one gives its owner and key
// with canonical true; a bare key gives itself as key and a zero Owner. A
// malformed ID is an error wrapping ErrInvalidID.
func ParseID(id string) (o Owner, key string, canonical bool, err error) {
	o, key, ok := execid.Parse(id)
	if !ok {
		return Owner{}, "", false, invalidID(id)
	}
	return o, key, o != Owner{}, nil
}

// checkID refuses an ID outside the grammar with ErrInvalidID.
func checkID(id string) error {
	if !execid.Valid(id) {
		return invalidID(id)
	}
	return nil
}

func invalidID(id string) error {
	return fmt.Errorf("%w: %q must match %s", ErrInvalidID, id, execid.Pattern)
}
