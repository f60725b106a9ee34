package main

import (
	"fmt"
	"io"
	"runtime/debug"
)

// printVersion writes the module version and the VCS commit the binary
// was built from, as far as the build recorded them.
func printVersion(w io.Writer) {
	version, commit := "(devel)", "unknown"
	info, ok := debug.ReadBuildInfo()
	if ok {
		version = info.Main.Version
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					commit += " (modified)"
				}
			}
		}
	}
	fmt.Fprintf(w, "termgate %s commit %s\n", version, commit)
}
