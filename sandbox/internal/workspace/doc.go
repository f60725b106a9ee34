//go:build linux

// Package workspace gives each tenant a workspace directory, a host
// identity of its own and, when asked, a disk and inode quota.
//
// A Store owns one workspace root:
//
//	ROOT/            root-owned, 0711
//	  state.json     tenant -> opaque id, uid, gid; root-owned, 0600
//	  .lock          held (flock) by the one Store using the root
//	  images/        0700: one sparse ext4 image per tenant with a quota
//	  mnt/ID         0711 mount point of an image; the workspace is the
//	                 root of that filesystem
//	  w/ID           the workspace itself when quotas are off
//
// Directory names are opaque ids, never tenant names, so nothing a sandbox
// sees in /proc/self/mountinfo tells who the tenant is. A tenant's uid is
// allocated once from the configured range and kept as long as its
// workspace exists: the kernel's per-user limits (inotify instances, POSIX
// message queues, RLIMIT_NPROC) are then each tenant's own.
//
// A quota is a size-capped filesystem: the image is made with mkfs.ext4
// (its size is the byte quota, its inode count the inode quota), attached
// to a loop device and mounted nodev,nosuid by the Store. A quota that was
// asked for and cannot be applied is an error wrapping ErrUnenforceable.
//
// Open removes what a previous instance left behind after a crash (mounts
// under mnt/, loop devices of its images) and reports each item. With
// Config.Adopt it first takes over each tenant's mount and loop device
// that is what the layout says: executions that outlived that instance
// write through them, and a second loop device on an image would put a
// second filesystem on it, which corrupts it.
//
// The package imports nothing of termgate.
package workspace
