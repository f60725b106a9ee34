//go:build linux && !race

package sandbox

// raceBuild is set when this binary, and so the sandbox's init, runs under
// the race detector.
const raceBuild = false
