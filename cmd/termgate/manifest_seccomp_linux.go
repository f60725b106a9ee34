package main

import "github.com/termgate/termgate/sandbox"

// containerSeccompProfile is the profile, from the sandbox filter's own
// tables.
func containerSeccompProfile() ([]byte, error) { return sandbox.ContainerSeccompProfile(), nil }
