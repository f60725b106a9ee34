package main

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionLine(t *testing.T) {
	t.Parallel()
	stamped := func(version string, settings ...debug.BuildSetting) *debug.BuildInfo {
		return &debug.BuildInfo{GoVersion: "go1.27.3", Main: debug.Module{Path: "github.com/termgate/termgate", Version: version}, Settings: settings}
	}
	rev := debug.BuildSetting{Key: "vcs.revision", Value: "d871b6ff90fb956a2e3e266112f649be90fb6333"}
	for _, tc := range []struct {
		name string
		info *debug.BuildInfo
		want string
	}{
		{"no build info", nil, "termgate devel commit unknown unknown"},
		{"go run, no vcs", stamped("(devel)"), "termgate devel commit unknown go1.27.3"},
		{"empty version", stamped(""), "termgate devel commit unknown go1.27.3"},
		{"tagged, clean", stamped("v0.3.0", rev, debug.BuildSetting{Key: "vcs.modified", Value: "false"}),
			"termgate v0.3.0 commit d871b6ff90fb956a2e3e266112f649be90fb6333 go1.27.3"},
		{"pseudo-version, modified", stamped("v0.0.0-20261201151609-d871b6ff90fb+dirty", rev, debug.BuildSetting{Key: "vcs.modified", Value: "true"}),
			"termgate v0.0.0-20261201151609-d871b6ff90fb+dirty commit d871b6ff90fb956a2e3e266112f649be90fb6333 (modified) go1.27.3"},
		{"modified listed before the revision", stamped("v0.3.0", debug.BuildSetting{Key: "vcs.modified", Value: "true"}, rev),
			"termgate v0.3.0 commit d871b6ff90fb956a2e3e266112f649be90fb6333 (modified) go1.27.3"},
	} {
		if got := versionLine(tc.info); got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
}

// TestVersionCommands: both spellings print the same single line and
// exit 0.
func TestVersionCommands(t *testing.T) {
	t.Parallel()
	var lines []string
	for _, arg := range []string{"--version", "version"} {
		code, stdout, stderr := runCLI(t, "", arg)
		if code != 0 || !strings.HasPrefix(stdout, "termgate ") || strings.Count(stdout, "\n") != 1 || stderr != "" {
			t.Errorf("termgate %s: status %d, stdout %q, stderr %q", arg, code, stdout, stderr)
		}
		lines = append(lines, stdout)
	}
	if lines[0] != lines[1] {
		t.Errorf("--version %q and version %q differ", lines[0], lines[1])
	}
	if code, _, stderr := runCLI(t, "", "version", "extra"); code == 0 {
		t.Errorf("version extra: status 0, stderr %q", stderr)
	}
}
