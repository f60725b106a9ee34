//go:build linux

// Package keeper is the small long-lived process that keeps executions
// alive while the gateway restarts, upgrades or crashes.
//
// One keeper serves one state directory (Config.Dir). It is the parent of
// every process it spawns: all forks happen on one goroutine locked to its
// OS thread for the keeper's whole life (package forker), because
// Pdeathsig and bwrap's --die-with-parent fire when the forking thread
// exits, not the process. That thread forks from a descriptor table of
// its own, into which each spawn's descriptors are passed, so that a fork
// does not copy (and the child's exec close again) every descriptor the
// keeper holds. The keeper holds the parent ends of each child's terminal
// or pipes (SpawnRequest.Held), reaps each child through a pidfd and
// keeps its wait status until the gateway collects it (Client.Forget),
// and hands all of it back to a gateway that connects again
// (Client.Children). No byte of a child's input or output passes through
// the keeper: the gateway reads and writes the held descriptors directly.
//
// The protocol runs over a SOCK_SEQPACKET unix socket, Dir/keeper.sock
// (mode 0600), with descriptors passed as SCM_RIGHTS. Each message is one
// packet of at most MaxMessage bytes of JSON whose unknown fields are
// ignored. There is one protocol, Version. The first exchange is a hello
// stating the range of versions the gateway speaks, so that a later
// protocol can be told apart: a keeper refuses a range without its
// Version with ErrVersion, and a Client refuses a welcome of another.
// Only peers with the keeper's own uid are accepted, and only one gateway
// at a time: a second is refused with ErrBusy naming the attached
// gateway's pid. The Client sends descriptors without os.File.Fd, so the
// caller's files keep their mode; the child's Files share their open file
// descriptions with the caller's, which become blocking.
//
// A spawn's arguments and environment travel in a sealed memfd of their
// own, the last of its descriptors, byte for byte (a spawn without one
// has neither). A spawn may name one of its cgroups as Into: the keeper
// forks the child straight into that cgroup2 directory (clone3's
// CLONE_INTO_CGROUP) and the reply says whether it did; where the kernel
// cannot, the child starts where the keeper is and the gateway moves it.
// A spawn may name cgroup v1 directories of its cgroups as Enter: the
// keeper's forking thread moves itself alone into them (no global cgroup
// lock), forks, and moves back, and the reply's Entered lists those the
// child was born in; the gateway moves it into the rest. A forking
// thread that cannot move back fails the spawn, its child killed, and
// every later one until it moved back; it never exits, because every
// child dies with it.
//
// Dir must be a directory of ours with mode 0700, not a symbolic link, in
// a parent nobody else may change (CheckDir): Serve and Dial refuse any
// other with ErrDir before they use it, and files in it open relative to
// it with O_NOFOLLOW (OpenIn). Dir/keeper.lock (flock) makes two keepers
// on one Dir impossible, and a socket left by a dead keeper is replaced.
//
// When no gateway is attached for Config.OrphanGrace (counted from the
// start too, until the first gateway connects), the keeper stops every
// child as a cancel would: SIGTERM to every process in the child's
// cgroups, Config.KillGrace later SIGKILL, then it reaps them, removes
// the cgroup directories and the child's Remove paths, and exits. It also
// exits when it has neither children nor a gateway for a short linger.
// A keeper killed with SIGKILL takes its children with it (Pdeathsig);
// the gateway sees end of file on the socket (Client.Lost).
//
// Children get SpawnRequest.Files as descriptors 0..n-1 switched to
// blocking mode (as exec.Cmd gives them), exactly SpawnRequest.Env (none
// when empty), a session of their own and Pdeathsig SIGKILL. Pdeathsig
// reaches the keeper's child alone: what it starts must die with it by
// other means (bwrap's --die-with-parent and its PID namespace). The
// keeper keeps descriptors it holds as plain numbers, outside its runtime
// poller, so the children's output never wakes it.
//
// Limits, each refused with ErrInvalid (or ErrFull), chosen to hold the
// largest spawn the sandbox makes with room to spare: MaxMessage bytes
// per message, MaxMeta bytes of meta, MaxFiles descriptors per spawn,
// MaxArgs arguments plus variables in MaxArgBytes, MaxPaths cgroups plus Remove paths
// (cgroups below /sys/fs/cgroup, Remove paths strictly below Dir),
// MaxResolves absolute, clean paths the child resolves, MaxChildren children (exited ones count until forgotten), keys of
// [A-Za-z0-9._-]{1,128}. At most 8 connections may be in their hello at
// once, each for HelloTimeout.
//
// A spawn may list the host paths its child resolves by name
// (SpawnRequest.Resolves): the keeper then forks it from a copy of its
// mount namespace that keeps only the mounts those need (package
// mountns), a shorter table for bwrap to read back after every mount it
// makes; the reply says whether it did. The copy serves the later spawns
// that keep the same mounts until the host's table changes or the
// keeper has forked nothing for a second. A keeper without CAP_SYS_ADMIN
// forks from its own namespace.
//
// The package imports nothing of termgate but package forker (and,
// through it, cgroup/v1thread and mountns).
package keeper
