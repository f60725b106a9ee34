package session

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
)

// fingerprint identifies a normalized spec: a start of an ID that is
// known must bring the same one (ErrConflict). It is a digest of the
// spec's JSON, not the JSON itself (about 700 bytes), which every
// execution would keep for its life beside the spec. Records hold the
// JSON, as they always have (recordedFingerprint), so that a termgate
// of either kind reads the other's.
type fingerprint [sha256.Size]byte

// fingerprintOf is the fingerprint of a normalized spec.
func fingerprintOf(spec Spec) (fingerprint, error) {
	b, err := json.Marshal(spec)
	if err != nil {
		return fingerprint{}, fmt.Errorf("%w: %w", ErrInvalidSpec, err)
	}
	return sha256.Sum256(b), nil
}

// recordedFingerprint reads a record's fingerprint: the JSON of the
// spec it was made from.
func recordedFingerprint(specJSON string) fingerprint {
	return sha256.Sum256([]byte(specJSON))
}
