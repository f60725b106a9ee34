package main

import "flag"

// checkServeArgs checks args as termgate serve would parse them, so a
// unit never carries a flag serve refuses, and reports whether they set
// --state-dir.
func checkServeArgs(args []string) (stateDir bool, err error) {
	if _, err := parseServe(args, nil); err != nil {
		return false, err
	}
	fs := serveFlagSet()
	if err := fs.Parse(args); err != nil {
		return false, err
	}
	fs.Visit(func(f *flag.Flag) { stateDir = stateDir || f.Name == "state-dir" })
	return stateDir, nil
}
