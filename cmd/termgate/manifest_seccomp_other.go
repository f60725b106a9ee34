//go:build !linux

package main

import "errors"

// containerSeccompProfile is built from the sandbox filter, which is
// Linux's alone.
func containerSeccompProfile() ([]byte, error) {
	return nil, usageError{errors.New("manifest seccomp: the profile is built on Linux only: run it there")}
}
