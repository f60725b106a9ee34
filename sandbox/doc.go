// Package sandbox runs one command inside a bubblewrap (bwrap) sandbox and
// nothing else: no fallback to an unsandboxed process exists.
//
// A Policy describes the process: its command, environment, workspace,
// binds, network, procfs, PTY or pipes, and resource ceilings. A Launcher
// checks the host once (bwrap, identity, cgroups), then turns policies into
// running Processes. Everything that cannot be enforced is an error.
package sandbox
