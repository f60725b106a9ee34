package main

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/termgate/termgate/sandbox"
)

// TestManifestSeccomp: termgate manifest seccomp prints the sandbox's
// container profile, valid JSON, and takes no argument.
func TestManifestSeccomp(t *testing.T) {
	t.Parallel()
	code, out, stderr := runCLI(t, "", "manifest", "seccomp")
	if code != 0 || out != string(sandbox.ContainerSeccompProfile()) {
		t.Fatalf("status %d (%s):\n%s", code, stderr, out)
	}
	var p struct {
		DefaultAction string `json:"defaultAction"`
		Syscalls      []struct {
			Names []string `json:"names"`
		} `json:"syscalls"`
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(out)))
	if err := dec.Decode(&p); err != nil || dec.More() || p.DefaultAction != "SCMP_ACT_ALLOW" || len(p.Syscalls) == 0 {
		t.Errorf("profile %+v: %v", p, err)
	}
	if code, _, _ := runCLI(t, "", "manifest", "seccomp", "extra"); code != 2 {
		t.Errorf("manifest seccomp extra: status %d, want 2", code)
	}
}
