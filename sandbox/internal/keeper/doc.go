//go:build linux

// Package keeper is the small long-lived process that keeps executions
// alive while the gateway restarts, upgrades or crashes.
//
// One keeper serves one state directory (Config.Dir). It is the parent of
// every process it spawns: all forks happen on one goroutine locked to its
// OS thread for the keeper's whole life, because Pdeathsig and bwrap's
// --die-with-parent fire when the forking thread exits, not the process.
// It holds the parent ends of each child's terminal or pipes (SpawnRequest.Held),
// reaps each child through a pidfd and keeps its wait status until the
// gateway collects it (Client.Forget), and hands all of it back to a
// gateway that connects again (Client.Children). No byte of a child's
// input or output passes through the keeper: the gateway reads and writes
// the held descriptors directly.
//
// The protocol runs over a SOCK_SEQPACKET unix socket, Dir/keeper.sock
// (mode 0600), with descriptors passed as SCM_RIGHTS. Each message is one
// packet of at most MaxMessage bytes: a version byte, an operation byte
// and a JSON body whose unknown fields are ignored, so a newer gateway can
// talk to an older keeper. The first exchange is a hello carrying the
// protocol version; a keeper refuses a version it cannot serve with
// ErrVersion. Only peers with the keeper's own uid are accepted, and only
// one gateway at a time: a second is refused with ErrBusy naming the
// attached gateway's pid. Dir must be a directory of ours with mode 0700;
// Dir/keeper.lock (flock) makes two keepers on one Dir impossible, and a
// socket left by a dead keeper is replaced.
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
// The package imports nothing of termgate.
package keeper
