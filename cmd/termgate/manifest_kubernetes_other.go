//go:build !linux

package main

import "errors"

// kubeServeEnv cannot check serve's flags where serve does not build.
func kubeServeEnv(*kubeOptions, []string) ([]kubeEnv, error) {
	return nil, usageError{errors.New("manifest kubernetes: serve's flags are checked on Linux only: run it there")}
}
