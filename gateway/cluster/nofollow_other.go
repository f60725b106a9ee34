//go:build !unix

package cluster

// noFollow: no such flag here; the state directory is checked instead.
const noFollow = 0
