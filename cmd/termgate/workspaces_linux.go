package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/termgate/termgate/sandbox"
)

// workspaceOptions are serve's tenant workspace flags.
type workspaceOptions struct {
	tenantUIDs sandbox.UIDRange
	bytes      int64
	inodes     int64
	bytesSet   bool // --workspace-quota or its environment was given
}

// defaultWorkspaceOptions are the defaults of serve's workspace flags.
func defaultWorkspaceOptions() workspaceOptions {
	return workspaceOptions{tenantUIDs: sandbox.DefaultTenantUIDs, bytes: sandbox.DefaultWorkspaceBytes, inodes: sandbox.DefaultWorkspaceInodes}
}

// register adds --tenant-uids, --workspace-quota and --workspace-inodes.
func (w *workspaceOptions) register(e *envFlags) {
	e.parsed("tenant-uids", "host uids (and gids) tenants get, FIRST:COUNT (default 3000000:100000)", uidRangeFlag(&w.tenantUIDs))
	e.parsed("workspace-quota", "disk quota of each new tenant workspace (an ext4 image), a size; 0 turns quotas off (default 10G, off with --dev when not root)", func(s string) error {
		w.bytesSet = true
		return quotaFlag(&w.bytes, sandbox.MinWorkspaceBytes)(s)
	})
	e.parsed("workspace-inodes", "inode quota of each new tenant workspace (default 1M)", quotaFlag(&w.inodes, sandbox.MinWorkspaceInodes))
}

// devDefaults turns the default quota off where it cannot work: a
// non-root --dev server cannot mount. An explicit quota still fails.
func (w *workspaceOptions) devDefaults() {
	if !w.bytesSet && os.Geteuid() != 0 {
		w.bytes = 0
	}
}

// config is the sandbox.WorkspacesConfig of these options.
func (w *workspaceOptions) config(root string) sandbox.WorkspacesConfig {
	c := sandbox.WorkspacesConfig{Root: root, TenantUIDs: w.tenantUIDs, Bytes: w.bytes}
	if w.bytes > 0 {
		c.Inodes = w.inodes
	}
	return c
}

// explain names the flags behind a quota OpenWorkspaces found it cannot
// apply: mkfs.ext4 refuses some (more inodes than the size holds).
func (w *workspaceOptions) explain(err error) error {
	if !errors.Is(err, sandbox.ErrUnenforceable) || w.bytes == 0 {
		return err
	}
	return fmt.Errorf("--workspace-quota %s with --workspace-inodes %d: %w (a larger quota, fewer inodes, or --workspace-quota 0 for none)",
		sizeText(uint64(w.bytes)), w.inodes, err)
}

// uidRangeFlag parses FIRST:COUNT.
func uidRangeFlag(dst *sandbox.UIDRange) func(string) error {
	return func(s string) error {
		first, count, ok := strings.Cut(s, ":")
		f, ferr := strconv.ParseUint(first, 10, 32)
		c, cerr := strconv.ParseUint(count, 10, 32)
		if !ok || ferr != nil || cerr != nil || f == 0 || c == 0 || f+c > 1<<32-1 {
			return fmt.Errorf("want FIRST:COUNT, two positive numbers with FIRST+COUNT below 2^32-1, got %q", s)
		}
		*dst = sandbox.UIDRange{First: uint32(f), Count: uint32(c)}
		return nil
	}
}

// quotaFlag parses a count or size with an optional K, M, G or T suffix:
// 0, or at least least.
func quotaFlag(dst *int64, least int64) func(string) error {
	return func(s string) error {
		v, err := parseSize(s)
		if err != nil {
			return err
		}
		if v != 0 && v < uint64(least) {
			return fmt.Errorf("%q is below the minimum %d (0 turns quotas off)", s, least)
		}
		*dst = int64(v)
		return nil
	}
}

func workspacesFlags(root *string, asJSON *bool) *flag.FlagSet {
	e := &envFlags{fs: newFlagSet("workspaces")}
	e.str(root, "workspace-root", "", "directory holding one workspace per tenant, made on demand under an opaque name")
	e.fs.BoolVar(asJSON, "json", false, "print the list as JSON")
	return e.fs
}

func workspacesFlagSet() *flag.FlagSet { return workspacesFlags(new(string), new(bool)) }

// runWorkspaces lists the tenant workspaces under a root: tenant, host
// uid, bytes and inodes used and allowed. It changes nothing and may run
// while a server holds the root.
func runWorkspaces(args []string, stdout, stderr io.Writer) error {
	var root string
	var asJSON bool
	fs := workspacesFlags(&root, &asJSON)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 || root == "" {
		return usageError{errors.New("workspaces: give --workspace-root DIR and nothing else")}
	}
	list, err := sandbox.ListWorkspaces(root)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Workspaces []sandbox.WorkspaceEntry `json:"workspaces"`
		}{append([]sandbox.WorkspaceEntry{}, list...)})
	}
	return printWorkspaces(stdout, list)
}

func printWorkspaces(w io.Writer, list []sandbox.WorkspaceEntry) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tUID\tBYTES USED\tBYTES ALLOWED\tINODES USED\tINODES ALLOWED\tMOUNTED")
	for _, e := range list {
		u := e.Usage
		allowed, inodes, mounted := formatBytes(u.BytesAllowed), strconv.FormatInt(u.InodesAllowed, 10), "-"
		if !e.Quota {
			allowed, inodes = "no quota", "no quota"
		} else if u.Mounted {
			mounted = "yes"
		} else {
			mounted = "no"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%s\t%s\n", e.Tenant, e.UID, formatBytes(u.BytesUsed), allowed, u.InodesUsed, inodes, mounted)
	}
	return tw.Flush()
}

// formatBytes prints a byte count in the units people read: 512, 64K, 9.8G.
func formatBytes(n int64) string {
	units := []string{"", "K", "M", "G", "T"}
	v, i := float64(n), 0
	for v >= 1024 && i < len(units)-1 {
		v, i = v/1024, i+1
	}
	if i == 0 {
		return strconv.FormatInt(n, 10)
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + units[i]
}

// quotaText is v, or "off" when quotas are off (bytes 0).
func quotaText(v string, bytes int64) string {
	if bytes == 0 {
		return "off"
	}
	return v
}
