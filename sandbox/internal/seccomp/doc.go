//go:build linux

// Package seccomp builds the sandbox's default seccomp filter: a classic
// BPF program that bwrap installs (--seccomp) on every process of the
// sandbox, its pid 1 included. Program is the filter; Refused lists the
// calls it refuses whatever their arguments, by name, for the container
// profile package sandbox derives from them (one list for both).
//
// The filter is a deny list: the sandbox already confines files, network
// and identity, so the filter only closes kernel interfaces that break out
// of a terminal or a namespace, that get around a ceiling, or that widen
// the kernel attack surface for no use a shell session has. Everything
// else, ptrace of the sandbox's own processes included (debuggers inside
// must keep working), is allowed. Only amd64 and arm64 are known; on any
// other architecture Program returns nil, which bwrap refuses, so a
// sandbox never runs unfiltered.
//
// The package imports nothing of termgate.
package seccomp
