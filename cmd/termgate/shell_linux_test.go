package main

import (
	"io"
	"strings"
	"testing"

	"github.com/termgate/termgate/sandbox"
)

// TestServeProcDefaultsToPrivateWhereSafe: serve's default procfs is a
// private one where the probe found the sandbox's pid 1 out of reach, and
// none elsewhere, with a warning that says why ps will not work; asking
// for private where it is unsafe is still refused.
func TestServeProcDefaultsToPrivateWhereSafe(t *testing.T) {
	t.Parallel()
	o, err := parseServe([]string{"--dev"}, io.Discard)
	if err != nil || o.proc != "auto" {
		t.Fatalf("default --proc: %q, %v", o.proc, err)
	}
	with := sandbox.Report{Checks: map[string]bool{"init_out_of_reach": true}}
	without := sandbox.Report{Checks: map[string]bool{}}
	cases := []struct {
		asked       string
		report      sandbox.Report
		want, warns string
		fails       bool
	}{
		{"auto", with, "private", "", false},
		{"auto", without, "none", "ps and top", false},
		{"none", with, "none", "", false},
		{"private", with, "private", "", false},
		{"private", without, "", "", true},
	}
	for _, c := range cases {
		got, warning, err := resolveProc(c.asked, c.report)
		if (err != nil) != c.fails || got != c.want || !strings.Contains(warning, c.warns) || (c.warns == "") != (warning == "") {
			t.Errorf("--proc %s, init out of reach %v: %q, warning %q, err %v", c.asked, c.report.Checks["init_out_of_reach"], got, warning, err)
		}
	}
	if _, err := parseServe([]string{"--dev", "--proc", "self-exe"}, io.Discard); err == nil || !strings.Contains(err.Error(), "auto, none or private") {
		t.Errorf("--proc self-exe: %v", err)
	}
}
