//go:build linux

// Package cgroup puts each sandbox execution in cgroups of its own, so that
// its ceilings hold for the whole process tree and the tree can be killed
// at once, on cgroup v2, v1 and hybrid hosts alike.
//
// Detect inspects the hierarchies once and returns a Host, read-only
// afterwards and shared by every execution. Host.Create makes an
// execution's Group, <hierarchy>/<parent>/<name> in each hierarchy its
// Limits need (and always in the cgroup2 tree, for cgroup.kill and CPU
// accounting); Group.Add moves the blocked bwrap in before it forks, and
// Group.Remove kills what is left and removes the directories. Tenants
// keeps one directory per tenant above its executions' own, with the
// tenant's ceilings, made with its first execution and removed after its
// last. Lock is a launcher's flock on its parent in every hierarchy, so
// that Host.Sweep removes what a crashed instance left and never the
// groups of a live one.
//
// A ceiling asked for that the host cannot apply is an error wrapping
// ErrUnenforceable, never a silent no-op. The package imports nothing of
// termgate.
package cgroup
