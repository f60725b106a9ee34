//go:build !linux

package promtext

// WriteProcess writes nothing where there is no /proc: termgate serves
// on Linux only.
func WriteProcess(*Writer) {}
