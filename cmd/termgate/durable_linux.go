package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/termgate/termgate/sandbox"
)

// Durable executions: serve keeps their state in --state-dir, and its
// sandboxes are children of a keeper process (sandbox.ServeKeeper) that
// outlives it, so a restart, an upgrade or a crash of serve loses no
// running execution. A new serve on the same directory takes them over.

// defaultOrphanGrace is how long executions outlive a server that does
// not come back.
const defaultOrphanGrace = 10 * time.Minute

// keeperLogLimit bounds the keeper's log: a longer one is cut at start.
const keeperLogLimit = 4 << 20

// keeperLogName is the keeper's log in the state directory.
const keeperLogName = "keeper.log"

// resolveStateDir returns the state directory serve uses, "" for none,
// made when missing and checked before anything reads or writes there
// (sandbox.CheckStateDir): a directory another user made first, a
// symbolic link, or one in a parent others may change is refused with
// the reason.
func resolveStateDir(asked string) (string, error) {
	switch asked {
	case "none":
		return "", nil
	case "":
		d, err := defaultStateDir(os.Geteuid(), os.Getenv("XDG_RUNTIME_DIR"))
		if err != nil {
			return "", err
		}
		asked = d
	}
	dir, err := sandbox.CheckStateDir(asked, true)
	if err != nil {
		return "", fmt.Errorf("serve: --state-dir %s: %w", asked, err)
	}
	return dir, nil
}

// defaultStateDir is in a parent only root or the user may write, never
// a world-writable one (/dev/shm, /tmp), where another local user could
// make the directory first: /run/termgate for root, tmpfs or not,
// $XDG_RUNTIME_DIR/termgate for others. Without XDG_RUNTIME_DIR a user
// other than root must say where (--state-dir).
func defaultStateDir(euid int, runtimeDir string) (string, error) {
	switch {
	case euid == 0:
		return "/run/termgate", nil
	case runtimeDir != "":
		return filepath.Join(runtimeDir, "termgate"), nil
	}
	return "", usageError{errors.New("serve: no default --state-dir for a user other than root without XDG_RUNTIME_DIR: " +
		"give --state-dir DIR (a directory of this user's, in a parent nobody else may write), or --state-dir none")}
}

// keeperCleanup is what a keeper cleans up of its server's once it ended
// with executions left in the state directory (no server came back for
// them): the cgroups under the parent and the workspace mounts, each only
// when no server holds them (their locks).
type keeperCleanup struct {
	CgroupParent  string           `json:"cgroup_parent,omitempty"`
	WorkspaceRoot string           `json:"workspace_root,omitempty"`
	TenantUIDs    sandbox.UIDRange `json:"tenant_uids"`
	Bytes         int64            `json:"bytes"`
	Inodes        int64            `json:"inodes"`
}

// run removes what a server that never came back left: it runs once the
// keeper ended. A server running meanwhile holds the locks, and then
// nothing is touched.
func (c keeperCleanup) run(log *slog.Logger) {
	// The keeper runs with an empty environment, which its children got;
	// now that it has none, the tools are looked up in the system's path.
	os.Setenv("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	if c.CgroupParent != "" {
		l, err := sandbox.NewLauncher(sandbox.Config{CgroupParent: c.CgroupParent, Logger: log})
		if err != nil {
			log.Info("cgroups left as they are", "err", err)
		} else {
			swept, err := l.SweepCgroups()
			if err == nil {
				log.Info("removed the cgroups a server left", "removed", len(swept.Removed), "killed", swept.Killed)
			} else {
				log.Info("cgroups left as they are", "err", err)
			}
			l.Close()
		}
	}
	if c.WorkspaceRoot != "" {
		ws, err := sandbox.OpenWorkspaces(sandbox.WorkspacesConfig{Root: c.WorkspaceRoot, TenantUIDs: c.TenantUIDs,
			Bytes: c.Bytes, Inodes: c.Inodes, Logger: log})
		if err != nil {
			log.Info("workspaces left as they are", "err", err)
			return
		}
		log.Info("removed the workspace mounts a server left", "removed", len(ws.Recovered()))
		ws.Close()
	}
}

// executionsLeft reports whether dir still holds executions' state: a
// server stopped for good leaves none.
func executionsLeft(dir string) bool {
	ents, err := os.ReadDir(filepath.Join(dir, "executions"))
	return err == nil && len(ents) > 0
}

// startKeeper returns how the launcher starts the keeper of dir when none
// runs: this binary again, in a session of its own (no terminal signal
// reaches it), not tied to serve's life, logging to dir/keeper.log.
func startKeeper(dir string, orphanGrace, killGrace time.Duration, cleanup keeperCleanup) func() error {
	return func() error {
		logf, err := openKeeperLog(dir)
		if err != nil {
			return err
		}
		defer logf.Close()
		spec, err := json.Marshal(cleanup)
		if err != nil {
			return err
		}
		cmd := exec.Command("/proc/self/exe", keeperArg, "--state-dir", dir,
			"--orphan-grace", orphanGrace.String(), "--kill-grace", killGrace.String(), "--cleanup", string(spec))
		cmd.Args[0] = "termgate" // as ps shows it
		cmd.Env = []string{}     // the keeper's children get exactly what serve gives them
		cmd.Dir, cmd.Stdout, cmd.Stderr = "/", logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("start the keeper: %w", err)
		}
		go cmd.Wait() // reaped when it ends while serve still runs
		return nil
	}
}

// openKeeperLog opens dir/keeper.log to append, cut when it grew past
// keeperLogLimit. It is opened relative to the directory and never
// through a symbolic link: one planted there is refused.
func openKeeperLog(dir string) (*os.File, error) {
	f, err := sandbox.OpenStateFile(dir, keeperLogName, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("--state-dir %s: keeper log: %w", dir, err)
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%s is not a regular file", f.Name())
	}
	if err == nil && fi.Size() > keeperLogLimit {
		err = f.Truncate(0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("--state-dir %s: keeper log: %w", dir, err)
	}
	return f, nil
}

// runKeeper is the keeper process: termgate __keeper --state-dir D. It
// ends its children only when told (SIGTERM, SIGINT) or when no server
// came back within the grace; SIGHUP is handled and ignored (never by
// SIG_IGN, which the sandboxes would inherit).
func runKeeper(_ context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet(keeperArg, flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("state-dir", "", "state directory")
	grace := fs.Duration("orphan-grace", defaultOrphanGrace, "orphan grace")
	kill := fs.Duration("kill-grace", sandbox.DefaultKillGrace, "SIGTERM to SIGKILL")
	spec := fs.String("cleanup", "{}", "what to clean up once no server came back (JSON)")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	var cleanup keeperCleanup
	if err := json.Unmarshal([]byte(*spec), &cleanup); err != nil {
		return usageError{fmt.Errorf("keeper: --cleanup: %w", err)}
	}
	if *dir == "" {
		return usageError{errors.New("keeper: --state-dir is required")}
	}
	signal.Notify(make(chan os.Signal, 1), syscall.SIGHUP)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	log := slog.New(slog.NewJSONHandler(c1Escaper{stderr}, nil))
	err := sandbox.ServeKeeper(ctx, sandbox.Config{StateDir: *dir, OrphanGrace: *grace, KillGrace: *kill, Logger: log})
	if err == nil && executionsLeft(*dir) {
		cleanup.run(log)
	}
	return err
}

// stopSignals records the signal that ends serve: SIGINT stops every
// execution (shutdown for good), SIGTERM restarts (executions live on for
// the next server on the state directory), unless --sigterm shutdown
// makes it SIGINT's equal: on Kubernetes a pod's processes, the keeper
// included, end with it, and clients must get real exits rather than a
// resume that cannot come. SIGHUP does not end serve: it reloads the keys
// (reloadOnHangup).
type stopSignals struct {
	ch              chan os.Signal
	sigtermShutdown bool
}

func watchStopSignals(sigtermShutdown bool) *stopSignals {
	s := &stopSignals{ch: make(chan os.Signal, 4), sigtermShutdown: sigtermShutdown}
	signal.Notify(s.ch, syscall.SIGTERM, os.Interrupt)
	return s
}

// restart reports whether the stop is a restart: the first signal was
// SIGTERM and --sigterm is restart. A stop without a signal (a test's
// cancel) is final.
func (s *stopSignals) restart() bool {
	signal.Stop(s.ch)
	select {
	case sig := <-s.ch:
		return sig != os.Interrupt && !s.sigtermShutdown
	default:
		return false
	}
}
