//go:build linux

// Package procevents follows sandbox process trees through the kernel's
// process event connector (netlink, NETLINK_CONNECTOR), which reports
// every fork, exec and exit on the host with the raw wait status.
//
// It exists because bwrap's init turns the command's wait status into
// 128+n and makes a setup failure look like the command's exit 1: the
// kernel's exit event still carries what really happened. A Watcher owns
// one subscribed socket and the one goroutine that reads it, until Close.
// Watcher.Track follows the tree under a pid (bwrap, its pid 1 and the
// first process that pid 1 forks, the workload); the Track it returns
// answers what the tree did, and Done closes once the whole tree was seen
// exiting, events were lost, or the watcher stopped.
//
// New succeeds only in the initial network namespace and, on older
// kernels, with CAP_NET_ADMIN; Watcher.SelfTest proves that events
// actually arrive (they do not from another pid or user namespace).
//
// The package imports nothing of termgate.
package procevents
