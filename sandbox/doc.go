//go:build linux

// Package sandbox runs one command inside a bubblewrap (bwrap) sandbox and
// nothing else: no fallback to an unsandboxed process exists.
//
// A Policy describes the process: its command, environment, workspace,
// binds, network, procfs, PTY or pipes, and resource ceilings. A Launcher
// checks the host once (bwrap, identity, cgroups), then turns policies into
// running Processes. Everything that cannot be enforced is an error.
//
// The package is Linux-only (namespaces, cgroups, seccomp, pidfds,
// openat2), and so is every file in it. Its subsystems are packages of
// their own under internal/: cgroup applies the ceilings and kills whole
// trees, seccomp builds the filter, procevents follows process trees
// through the kernel's process events, sandboxinit is the init between
// bwrap and the command, and workspace keeps tenant workspaces. None of
// them imports anything else of termgate; this package translates their
// errors into its own (ErrUnenforceable, ErrCgroupsInUse).
//
// A state directory (Config.StateDir, where a keeper holds the sandboxes
// across restarts of the server) is checked before any use
// (CheckStateDir: ours, 0700, not a link, in a parent nobody else may
// change), and every file in it is opened relative to it without
// following a link (OpenStateFile).
package sandbox
