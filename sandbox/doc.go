//go:build linux

// Package sandbox runs one command inside a bubblewrap (bwrap) sandbox and
// nothing else: no fallback to an unsandboxed process exists.
//
// A Policy describes the process: its command, environment, workspace,
// binds, network, procfs, PTY or pipes, and resource ceilings. A Launcher
// checks the host once (bwrap, identity, cgroups), then turns policies into
// running Processes. Everything that cannot be enforced is an error.
//
// bwrap makes a user namespace of its own for each sandbox. Where bwrap
// is installed setuid root and the launcher is root, bwrap makes the
// other namespaces with its privilege and the command runs as the
// unprivileged host identity: the only way where the host gives the
// sandbox identity no user namespace. Where a kernel setting refuses
// them (user.max_user_namespaces = 0, an AppArmor restriction) and
// bwrap cannot make one, NewLauncher fails naming the setting and the
// fix; a container's profile that refuses them fails the probe. A cgroup
// hierarchy the launcher cannot write counts as absent. Without a pids
// controller, Config.PidsFallback carries the pids ceiling as
// RLIMIT_NPROC. Probe reports each guarantee as held, degraded (by an
// operator's flag) or missing. ContainerSeccompProfile is the seccomp
// profile of a container running termgate, derived from the sandbox's
// own filter.
//
// A process's output is read on goroutines of its own (none while it is
// idle) and written to the Stdio writers its caller gave; the reader
// blocks on a writer that blocks, so the caller decides whether output
// waits for anyone. Its exit is reported exactly where the kernel's
// process events are available (Exit.Exact).
//
// Without a state directory the launcher forks each bwrap itself: the
// sandboxes die with it. With one (Config.StateDir) a keeper process
// forks them instead, so that they outlive the launcher: ServeKeeper is
// its main loop (`termgate keeper`), and the launcher starts it
// (Config.StartKeeper) when none listens at StateDir/keeper.sock. The
// keeper holds the parent ends of each process's terminal or pipes and
// its wait status, but no byte of input or output passes through it. A
// launcher that restarts, upgrades or crashes leaves the processes with
// the keeper; Detach lets them go on purpose, and the next launcher on
// the same StateDir takes them back, running or ended (Adopt), with the
// policy, cgroups and final exit kept in the keeper's notes. A process's
// exit stays with the keeper until its caller recorded it (Release).
// Before the launcher ends a sandbox whose command exited (a pid 1 that
// cannot run would keep it open), the command's status goes to the notes
// too: bwrap then reports the kill, and a launcher that adopts the ended
// process without its final exit reports the command's end instead.
// After Config.OrphanGrace without a launcher, the keeper stops every
// process as a cancel would and removes its cgroups and its directory,
// StateDir/executions/<Policy.Key>. A state directory is checked before
// any use (CheckStateDir: ours, 0700, not a link, in a parent nobody
// else may change), and every file in it is opened relative to it
// without following a link (OpenStateFile).
//
// A sandbox without the host's network has a network namespace of its
// own with loopback only. termgate opens sockets in it from the host
// (NetNS): a thread enters the namespace for socket(2) alone and
// returns, and the socket, which keeps its namespace, is served from the
// host, so nothing extra runs in the sandbox. A thread that cannot
// return to the host's namespace is never used again (ErrNetNSStuck).
// Entering needs CAP_SYS_ADMIN, and a sandbox sharing the host's network
// is refused. Policy.Redirect gives that namespace default routes
// through lo and nftables rules that send every outside TCP connection,
// DNS query and UDP datagram to termgate's listeners on its loopback and
// refuse the rest (internal/netredirect, netlink written from the host
// on sockets opened through NetNS). Launcher.ProbeSockets and
// Launcher.CheckRedirect tell whether the host can do either.
//
// The network of a sandbox with Policy.Listen or Policy.Redirect is made
// before its bwrap, off the start's path: the launcher keeps one made
// ahead for the next start of each kind (at most 4 kinds), on a thread
// that runs only when a core is idle, with lo up, the redirect installed
// and the sockets open; bwrap is forked in it (the forking thread enters
// it for the fork alone) and makes none. A start that finds none ready
// makes its own first. Such a namespace belongs to the host's user
// namespace, not the sandbox's, so nothing in the sandbox could hold a
// capability over its routes or rules. Process.Sockets hands the
// sockets over; Process.NetNS opens more later (NetNS.Open opens a
// policy's again, for an adopted process).
//
// bwrap is forked straight into the execution's cgroup2 directory
// (clone3's CLONE_INTO_CGROUP) where the kernel can. A fork that must be
// born in cgroup v1 directories, or that may start from a lean mount
// namespace, runs on one goroutine locked to its OS thread
// (internal/forker), the launcher's own or the keeper's (which forks
// every child of the keeper): Pdeathsig and
// bwrap's --die-with-parent fire when the forking thread exits, and that
// thread never does. It enters the execution's v1 directories alone
// before the fork (internal/cgroup/v1thread), and forks bwrap from a
// copy of the mount namespace that keeps only the mounts bwrap resolves
// (internal/mountns), whose shorter table bwrap reads back faster after
// each mount it makes.
//
// The package is Linux-only (namespaces, cgroups, seccomp, pidfds,
// openat2), and so is every file in it. Its subsystems are packages of
// their own under internal/: cgroup applies the ceilings and kills whole
// trees (cgroup/v1thread moves the forking thread), seccomp builds the
// filter, procevents follows process trees through the kernel's process
// events, sandboxinit is the init between bwrap and the command,
// workspace keeps tenant workspaces, keeper is the keeper process and
// its protocol, forker the forking thread, mountns the lean mount
// namespaces and netredirect a sandbox network's routes and rules.
// None of them imports anything of termgate but another of them; this
// package translates their errors into its own
// (ErrUnenforceable, ErrCgroupsInUse).
package sandbox
