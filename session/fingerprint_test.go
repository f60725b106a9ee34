package session

import (
	"encoding/hex"
	"encoding/json"
	"testing"

	"github.com/termgate/termgate/sandbox"
)

// TestRecordedFingerprint: a record's fingerprint reads back as the
// fingerprint it was written from, and so does one written before
// fingerprints were digests, which holds the spec's JSON: an execution
// restored from it still takes a start of the same spec as its own.
func TestRecordedFingerprint(t *testing.T) {
	t.Parallel()
	s := Spec{Policy: sandbox.Policy{Command: []string{"/bin/sh", "-c", "true"}}}
	fp, err := fingerprintOf(s)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := fingerprintOf(Spec{Policy: sandbox.Policy{Command: []string{"/bin/sh", "-c", "false"}}})
	if fp == other {
		t.Fatal("two specs have one fingerprint")
	}
	js, _ := json.Marshal(s)
	for _, tc := range []struct{ name, recorded string }{
		{"digest", hex.EncodeToString(fp[:])},
		{"spec's JSON, as written before digests", string(js)},
	} {
		if got := recordedFingerprint(tc.recorded); got != fp {
			t.Errorf("%s: read back as %x, want %x", tc.name, got, fp)
		}
	}
}
