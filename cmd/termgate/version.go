package main

import (
	"fmt"
	"io"
	"runtime/debug"
)

// printVersion writes the module version and the VCS commit the binary
// was built from, as far as the build recorded them, on one line.
func printVersion(w io.Writer) {
	info, _ := debug.ReadBuildInfo() // nil without build information
	fmt.Fprintln(w, versionLine(info))
}

// versionLine says which termgate info describes: "termgate VERSION
// commit REVISION", with " (modified)" when the work tree had changes
// and the Go version last. A build without module information (nil) or
// outside a module version is "devel"; one built without VCS stamping
// (go build -buildvcs=false, go run, tests) has commit "unknown".
func versionLine(info *debug.BuildInfo) string {
	version, commit, goVersion := "devel", "unknown", "unknown"
	if info == nil {
		return fmt.Sprintf("termgate %s commit %s %s", version, commit, goVersion)
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		version = v
	}
	if info.GoVersion != "" {
		goVersion = info.GoVersion
	}
	modified := ""
	for _, s := range info.Settings {
		switch {
		case s.Key == "vcs.revision" && s.Value != "":
			commit = s.Value
		case s.Key == "vcs.modified" && s.Value == "true":
			modified = " (modified)"
		}
	}
	return fmt.Sprintf("termgate %s commit %s%s %s", version, commit, modified, goVersion)
}
