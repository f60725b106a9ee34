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

func runExec(_ context.Context, args []string, _ io.Reader, _, _ io.Writer) error {
	return linuxOnly("exec", args)
}

func runVerify(_ context.Context, args []string, _, _ io.Writer) error {
	return linuxOnly("verify", args)
}

func runServe(_ context.Context, args []string, _, _ io.Writer) error {
	return linuxOnly("serve", args)
}

func runKeeper(_ context.Context, args []string, _ io.Writer) error {
	return linuxOnly(keeperArg, args)
}

func runWorkspaces(args []string, _, _ io.Writer) error { return linuxOnly("workspaces", args) }

// linuxOnly answers --help (the help says "Linux only"), and anything else
// with the reason the command cannot run here.
func linuxOnly(cmd string, args []string) error {
	for _, a := range args {
		if a == "-h" || a == "-help" || a == "--help" {
			return helpRequest{newFlagSet(cmd)}
		}
	}
	return fmt.Errorf("termgate %s runs on Linux only (this is %s); the client commands run, attach, ls, logs, cancel and token work here", cmd, runtime.GOOS)
}

// On other systems the sandbox commands have no flags to complete.

func serveFlagSet() *flag.FlagSet      { return newFlagSet("serve") }
func execFlagSet() *flag.FlagSet       { return newFlagSet("exec") }
func verifyFlagSet() *flag.FlagSet     { return newFlagSet("verify") }
func workspacesFlagSet() *flag.FlagSet { return newFlagSet("workspaces") }
