package session

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
)

// fingerprint identifies a normalized spec: a start of an ID that is
// known must bring the same one (ErrConflict). It is a digest of the
// spec's JSON, not the JSON itself (about 700 bytes), which every
// execution would keep for its life beside the spec.
type fingerprint [sha256.Size]byte

// fingerprintOf is the fingerprint of a normalized spec.
func fingerprintOf(spec Spec) (fingerprint, error) {
	b, err := json.Marshal(spec)
	if err != nil {
		return fingerprint{}, fmt.Errorf("%w: %w", ErrInvalidSpec, err)
	}
	return sha256.Sum256(b), nil
}

// recordedFingerprint reads a record's fingerprint: the digest in hex,
// or the spec's JSON itself, which records written before the digest
// hold.
func recordedFingerprint(s string) fingerprint {
	var f fingerprint
	if len(s) == hex.EncodedLen(len(f)) {
		if _, err := hex.Decode(f[:], []byte(s)); err == nil {
			return f
		}
	}
	return sha256.Sum256([]byte(s))
}
