//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/termgate/termgate/sandbox/internal/workspace"
)

// Workspace quota defaults and bounds.
const (
	DefaultWorkspaceBytes  = 10 << 30
	DefaultWorkspaceInodes = 1 << 20
	MinWorkspaceBytes      = workspace.MinBytes
	MinWorkspaceInodes     = workspace.MinInodes
)

// WorkspacesConfig configures OpenWorkspaces.
type WorkspacesConfig struct {
	// Root holds every tenant's workspace (an absolute path).
	Root string
	// TenantUIDs is where tenant ids come from (DefaultTenantUIDs); give
	// the Launcher the same range.
	TenantUIDs UIDRange
	// Bytes and Inodes are each new workspace's quota. Bytes 0 turns
	// quotas off: workspaces are then plain directories of the host disk.
	Bytes, Inodes int64
	// Mkfs is the mkfs.ext4 program ("mkfs.ext4" in PATH).
	Mkfs string
	// Logger receives what recovery removed and adopted; nil discards.
	Logger *slog.Logger
	// Adopt makes OpenWorkspaces take over the workspace mounts and loop
	// devices a previous instance left, each checked to be a tenant's
	// image on its loop device at its mount point (see Adopted), instead
	// of removing them: set it when executions outlive the server (a
	// state directory), as their sandboxes use those workspaces. What is
	// not a tenant's workspace is still removed (see Recovered).
	Adopt bool
}

// Workspace is one tenant's workspace: the host directory for
// Policy.Workspace and the ids for Policy.UID and Policy.GID.
type Workspace = workspace.Workspace

// WorkspaceUsage is how much of its quota a workspace uses.
type WorkspaceUsage = workspace.Usage

// WorkspaceEntry describes one tenant's workspace for the operator.
type WorkspaceEntry = workspace.Entry

// Workspaces hands out tenant workspaces, each with its own host uid and,
// when configured, a disk and inode quota (a size-capped ext4 image
// mounted nodev,nosuid). It is safe for concurrent use.
type Workspaces struct {
	s *workspace.Store
}

// OpenWorkspaces takes the workspace root and removes what a crashed
// instance left there (see Recovered), or, with Adopt, takes over what is
// still a tenant's workspace (see Adopted). A quota this host cannot apply
// is an error wrapping ErrUnenforceable.
func OpenWorkspaces(cfg WorkspacesConfig) (*Workspaces, error) {
	ids := cfg.TenantUIDs
	if ids == (UIDRange{}) {
		ids = DefaultTenantUIDs
	}
	s, err := workspace.Open(workspace.Config{
		Root: cfg.Root, IDs: workspace.IDRange{First: ids.First, Count: ids.Count},
		Bytes: cfg.Bytes, Inodes: cfg.Inodes, Mkfs: cfg.Mkfs, Logger: cfg.Logger, Adopt: cfg.Adopt,
	})
	if err != nil {
		return nil, translate(err)
	}
	return &Workspaces{s: s}, nil
}

// translate makes the workspace package's unenforceable quota this
// package's ErrUnenforceable, the one callers test for.
func translate(err error) error {
	if errors.Is(err, workspace.ErrUnenforceable) {
		return fmt.Errorf("%w: %w", ErrUnenforceable, err)
	}
	return err
}

// Prepare returns tenant's workspace, making it on first use.
func (w *Workspaces) Prepare(tenant string) (Workspace, error) {
	ws, err := w.s.Prepare(tenant)
	return ws, translate(err)
}

// Usage reports a tenant's workspace usage.
func (w *Workspaces) Usage(tenant string) (WorkspaceUsage, error) { return w.s.Usage(tenant) }

// List describes every workspace, by tenant.
func (w *Workspaces) List() ([]WorkspaceEntry, error) { return w.s.List() }

// Recovered lists what OpenWorkspaces removed that a previous instance
// had left (stale mounts, loop devices, half-made images).
func (w *Workspaces) Recovered() []string { return w.s.Recovered() }

// Adopted lists the mounts and loop devices OpenWorkspaces took over
// (WorkspacesConfig.Adopt) from a previous instance.
func (w *Workspaces) Adopted() []string { return w.s.Adopted() }

// Close unmounts the workspaces' images and releases the root. A
// sandbox keeps the workspace bound into it, and with it the image's loop
// device, until it ends: executions that outlive a restart keep writing,
// and the next OpenWorkspaces with Adopt mounts that same device.
func (w *Workspaces) Close() error { return w.s.Close() }

// ProbeWorkspaceQuota makes, mounts and removes a small quota image in a
// scratch root, as OpenWorkspaces does with quotas on: the error says why
// this host cannot apply workspace quotas.
func ProbeWorkspaceQuota() error {
	root, err := os.MkdirTemp("", "termgate-quota-probe-")
	if err != nil {
		return fmt.Errorf("workspace quota probe: %w", err)
	}
	defer os.RemoveAll(root)
	w, err := OpenWorkspaces(WorkspacesConfig{Root: root, Bytes: MinWorkspaceBytes, Inodes: MinWorkspaceInodes})
	if err != nil {
		return err
	}
	return w.Close()
}

// ListWorkspaces describes every workspace under root without taking it,
// for an operator while a server runs.
func ListWorkspaces(root string) ([]WorkspaceEntry, error) { return workspace.List(root) }
