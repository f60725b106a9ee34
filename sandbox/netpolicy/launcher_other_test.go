//go:build !linux

package netpolicy

func releaseLauncher() {}
