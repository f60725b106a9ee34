//go:build !linux

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime"
)

// The sandbox commands need Linux (bubblewrap, cgroups, seccomp); on other
// systems they only say so. The client commands work everywhere.

func runExec(_ context.Context, _ []string, _ io.Reader, _, _ io.Writer) error {
	return linuxOnly("exec")
}

func runVerify(_ context.Context, _ []string, _, _ io.Writer) error { return linuxOnly("verify") }

func runServe(_ context.Context, _ []string, _, _ io.Writer) error { return linuxOnly("serve") }

func runWorkspaces(_ []string, _, _ io.Writer) error { return linuxOnly("workspaces") }

func linuxOnly(cmd string) error {
	return fmt.Errorf("termgate %s runs on Linux only (this is %s); the client commands run, attach, ls, logs, cancel and token work here", cmd, runtime.GOOS)
}

// On other systems the sandbox commands have no flags to complete.

func serveFlagSet() *flag.FlagSet      { return newFlagSet("serve") }
func execFlagSet() *flag.FlagSet       { return newFlagSet("exec") }
func verifyFlagSet() *flag.FlagSet     { return newFlagSet("verify") }
func workspacesFlagSet() *flag.FlagSet { return newFlagSet("workspaces") }
