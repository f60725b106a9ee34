package session

import (
	"fmt"

	"github.com/termgate/termgate/session/execid"
)

// Execution IDs: their grammar and the random names made for executions
// are session/execid's, which the gateway imports too. What follows checks
// IDs coming in, with the errors of this package.

// ParseID splits an execution ID. A canonical one gives its owner and key
// with canonical true; a bare key gives itself as key and a zero Owner. A
// malformed ID is an error wrapping ErrInvalidID.
func ParseID(id string) (o execid.Owner, key string, canonical bool, err error) {
	o, key, ok := execid.Parse(id)
	if !ok {
		return execid.Owner{}, "", false, invalidID(id)
	}
	return o, key, o != execid.Owner{}, nil
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
