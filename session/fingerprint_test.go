package session

import (
	"encoding/json"
	"testing"

	"github.com/termgate/termgate/sandbox"
	"github.com/termgate/termgate/session/internal/statedir"
)

// TestRecordedFingerprint: a record holds the spec's JSON as its
// fingerprint, as records always have, and it reads back as the
// fingerprint the execution was made with; another spec's does not.
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
	if got := statedir.FingerprintOf(js); got != fp {
		t.Errorf("the spec's JSON reads back as %x, want %x", got, fp)
	}
}
