package main

import (
	"flag"
	"fmt"
	"io"
)

// seccompFlags is manifest seccomp's flag set: it has none of its own.
func seccompFlags() *flag.FlagSet { return newFlagSet("manifest seccomp") }

// runManifestSeccomp prints the seccomp profile of a container that runs
// termgate serve (sandbox.ContainerSeccompProfile): termgate manifest
// seccomp.
func runManifestSeccomp(args []string, stdout io.Writer) error {
	fs := seccompFlags()
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("manifest seccomp: unexpected argument %q", fs.Arg(0))}
	}
	profile, err := containerSeccompProfile()
	if err != nil {
		return err
	}
	_, err = stdout.Write(profile)
	return err
}
