//go:build !linux

package main

import "errors"

// checkServeArgs cannot check serve's flags where serve does not build:
// its units are for Linux hosts, so it says so.
func checkServeArgs([]string) (bool, error) {
	return false, usageError{errors.New("manifest systemd: serve's flags are checked on Linux only: run it there")}
}
