package main

import (
	"context"
	"os"
	"testing"
)

// TestMain lets the test binary be the keeper that serve starts through
// /proc/self/exe, as the termgate binary is.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == keeperArg {
		os.Exit(exitCode(run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr), os.Stderr))
	}
	os.Exit(m.Run())
}
