package sandbox

import (
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"

	"github.com/termgate/termgate/sandbox/internal/seccomp"
)

// RunBare runs p's plan with bwrap alone and waits for it: the bwrap
// arguments and descriptors a start gives it, forked as a start forks
// (from the lean mount namespace, as the sandbox identity), and the
// command run by bwrap itself. None of termgate's supervision is there:
// no init, cgroup, process events, keeper or output handling; the output
// is discarded. It is the floor that a start's cost is measured against
// (benchmarks and termgate-load), and isolates only as the plan does.
func (l *Launcher) RunBare(p Policy) error {
	return l.runBare(p.Normalize(), true, nil, io.Discard)
}

// runBare is RunBare, forked from the host's mount namespace unless lean,
// with the plan's options edited by edit when given, and the output
// copied to out.
func (l *Launcher) runBare(p Policy, lean bool, edit func(opts []string) ([]string, error), out io.Writer) error {
	pl := buildPlan(p, l.layout, seccomp.Program())
	if edit != nil {
		opts, err := edit(pl.opts)
		if err != nil {
			return err
		}
		pl.opts = opts
	}
	for _, kv := range p.sortedEnv() {
		k, v, _ := strings.Cut(kv, "=")
		pl.opts = append(pl.opts, "--setenv", k, v)
	}
	pl.argv = append([]string{"--"}, p.Command...)
	files, err := l.openFiles(pl, p)
	if err != nil {
		return err
	}
	defer closeAll(files)
	argsR, argsW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer argsR.Close()
	argsW.Write(encodeArgs(pl.opts))
	argsW.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer outR.Close()
	// No control socket: the command does not read one.
	req := spawnRequest{path: l.bwrap, args: append([]string{"bwrap", "--args", fmt.Sprint(argsFD)}, pl.argv...),
		files: append([]*os.File{nil, outW, outW, nil, argsR}, files...)}
	if id, _ := l.identityFor(p); id.switchTo {
		req.cred = &syscall.Credential{Uid: id.uid, Gid: id.gid, Groups: []uint32{}}
	}
	if !lean {
		cmd := execCommand(req)
		err := cmd.Start()
		outW.Close()
		if err != nil {
			return err
		}
		io.Copy(out, outR)
		return cmd.Wait()
	}
	req.resolves = l.resolves(p)
	child, err := spawnOn(launcherForker, req)
	outW.Close()
	if err != nil {
		return err
	}
	io.Copy(out, outR)
	if ws, _, err := child.wait(); err != nil || ws.ExitStatus() != 0 {
		return fmt.Errorf("bwrap: %v, exit status %d", err, ws.ExitStatus())
	}
	return nil
}
