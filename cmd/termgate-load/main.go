//go:build linux

// Command termgate-load measures a real termgate server the way issue 17's
// table does, from one command: it starts `termgate serve` on 127.0.0.1
// with its own secret, workspace root, state directory and cgroup parent,
// and measures, over the wire protocol,
//
//   - keystroke echo p50 / p99: one byte in, its echo from `cat` on a raw
//     PTY out, one at a time; and the same on the two floors the issue
//     measures it against, a bare PTY and a bare WebSocket echo whose
//     server is another process, and through a bare relay between the two
//     in that process, the least a gateway does (floors.go);
//   - the server process's CPU and context switches (every thread's
//     voluntary and nonvoluntary) per keystroke over the same keystrokes;
//   - opening shells (bash on a PTY, a WebSocket each), so many at a time:
//     open when the prompt arrived; and as many of the shell's plan run
//     bare by bwrap, its floor (shellfloor.go), with the machine's CPU
//     per shell for both, and termgate's also without this program's
//     own (its WebSocket clients, which the floor has none of);
//   - CPU per shell of the whole process tree (the server and everything
//     below it, live or reaped) from before the first open until the last
//     shell is gone;
//   - CPU per shell of the server process alone, and of the keeper alone
//     (its own threads, not the sandboxes it reaped), over the opening;
//   - server RSS per attached idle session, processes and tree PSS per
//     shell, with every shell open and attached;
//   - PTY output: cat of a file on a terminal read through termgate, and
//     on its two floors, a bare read of the PTY and a bare delivery of
//     each read to another process over a WebSocket, in alternating
//     rounds (throughput.go).
//
// With -attack snapshot it runs instead the snapshot attack of the
// hardening round (docs/performance.md): a large terminal drawn full,
// then two attaches asking for its snapshot on a connection that reads
// nothing, and reports serve's RSS idle, at its peak and afterwards.
//
// Every wait is bounded (-timeout), every process it starts is stopped by
// its pid, and what it created is removed. The defaults finish in about a
// minute; -keys 2000 -shells 500 gives the table.
//
// Usage:
//
//	make build && go run ./cmd/termgate-load -termgate bin/termgate
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

// options are the command line.
type options struct {
	termgate       string        // the termgate binary to serve with
	keys, warm     int           // keystrokes timed, and sent before
	shells, par    int           // shells opened, and at a time
	inputPerSecond int           // serve's --input-per-second; 0: its default
	cpuProfile     string        // where to write serve's CPU profile of the opening; "" for none
	profileFor     time.Duration // how long that profile runs
	profilePhase   string        // what it profiles: phaseShells or phaseEcho
	heapProfile    string        // where to write serve's heap profile with the shells idle; "" for none
	settle         time.Duration // how long after the last shell closed the server's RSS is sampled again
	timeout        time.Duration // the whole run
	floors         bool          // measure the echo floors first
	attack         string        // "snapshot": run that attack instead of the table (attack.go)
	attackSize     int           // its terminal's rows and columns
	outputMiB      int           // the PTY output's file, in MiB; 0: no output rounds
	outputRounds   int           // its rounds
}

func main() {
	echoServerRole()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "termgate-load:", err)
		os.Exit(1)
	}
}

// The phases -cpuprofile can profile.
const (
	phaseShells = "shells"
	phaseEcho   = "echo"
)

// run parses args, serves, measures and prints the table to stdout.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parse(args, stderr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	if o.attack != "" {
		srv, err := startServer(ctx, o)
		if err != nil {
			return err
		}
		err = snapshotAttack(ctx, srv, o, stdout)
		if stopErr := srv.stop(); err == nil {
			err = stopErr
		}
		return err
	}
	var f floors
	var sf shellFloor
	if o.floors {
		if f, err = measureFloors(ctx, o); err != nil {
			return fmt.Errorf("floors: %w", err)
		}
		if sf, err = measureShellFloor(ctx, o); err != nil {
			return fmt.Errorf("shells' floor: %w", err)
		}
	}
	srv, err := startServer(ctx, o)
	if err != nil {
		return err
	}
	t, err := measure(ctx, srv, o)
	t.floors, t.shellFloor, t.floorsOn = f, sf, o.floors
	if stopErr := srv.stop(); err == nil {
		err = stopErr
	}
	if err != nil {
		return err
	}
	t.print(stdout, o)
	return nil
}

func parse(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("termgate-load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.termgate, "termgate", defaultBinary(), "the termgate binary to serve with")
	fs.IntVar(&o.keys, "keys", 2000, "keystrokes timed")
	fs.IntVar(&o.warm, "warm", 100, "keystrokes sent before timing")
	fs.IntVar(&o.shells, "shells", 50, "shells opened (the table: 500)")
	fs.IntVar(&o.par, "par", 16, "shells opened at a time")
	fs.IntVar(&o.inputPerSecond, "input-per-second", 0, "serve's --input-per-second (0: its default)")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "bound on the whole run")
	fs.BoolVar(&o.floors, "floors", true, "first time the same keystrokes on a bare PTY, over a bare WebSocket echo in another process, and through a bare WebSocket-to-PTY relay there, and open as many shells' plans bare by bwrap")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write serve's CPU profile (pprof, through --metrics-listen) of the -profile phase to `FILE`")
	fs.StringVar(&o.profilePhase, "profile", phaseShells, "what -cpuprofile profiles: "+phaseShells+" (from the first shell's open) or "+phaseEcho+" (from the first timed keystroke)")
	fs.DurationVar(&o.profileFor, "profile-for", 5*time.Second, "how long -cpuprofile profiles (whole seconds)")
	fs.DurationVar(&o.settle, "settle", 5*time.Second, "how long after the last shell closed the server's RSS is sampled again: the runtime returns freed memory to the OS lazily")
	fs.StringVar(&o.heapProfile, "heapprofile", "", "write serve's heap profile (pprof, through --metrics-listen) with every shell attached and idle to `FILE`, its goroutines to FILE.goroutines, and its heap once the shells ended and -settle passed to FILE.settled")
	fs.StringVar(&o.attack, "attack", "", "run an attack instead of the table: snapshot (a terminal's screen asked for twice on a connection that reads nothing; serve's RSS)")
	fs.IntVar(&o.attackSize, "attack-size", 1000, "the snapshot attack's terminal rows and columns")
	fs.IntVar(&o.outputMiB, "output-mib", 64, "the PTY output rounds' file, `MiB` of base64 lines that cat writes to a terminal read through termgate, by a bare read and by a bare delivery (the table: 140); 0 skips them")
	fs.IntVar(&o.outputRounds, "output-rounds", 3, "the PTY output's rounds, each the three in turn")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: termgate-load [-termgate PATH] [-keys 2000] [-shells 50] [-par 16]")
		fmt.Fprintln(stderr, "example, the full table: termgate-load -termgate bin/termgate -shells 500")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	case o.keys < 2 || o.warm < 0 || o.shells < 1 || o.par < 1 || o.timeout <= 0 || o.settle < 0:
		return o, errors.New("-keys must be at least 2, -shells and -par at least 1, -warm and -settle at least 0, -timeout positive")
	case o.outputMiB < 0 || o.outputMiB > 1024 || o.outputRounds < 1 || o.outputRounds > maxOutputRounds:
		return o, fmt.Errorf("-output-mib must be 0 to 1024 (0: no output rounds), -output-rounds 1 to %d", maxOutputRounds)
	case o.profileFor < time.Second:
		return o, errors.New("-profile-for must be at least 1s")
	case o.profilePhase != phaseShells && o.profilePhase != phaseEcho:
		return o, fmt.Errorf("-profile must be %s or %s", phaseShells, phaseEcho)
	case o.attack != "" && (o.attack != "snapshot" || o.attackSize < 2 || o.attackSize > 1000):
		return o, errors.New("-attack: want snapshot, with -attack-size 2 to 1000")
	case o.termgate == "":
		return o, errors.New("no termgate binary: build one (make build) and pass -termgate")
	}
	return o, nil
}

// defaultBinary is termgate beside this program, else bin/termgate, else
// none.
func defaultBinary() string {
	if self, err := os.Executable(); err == nil {
		if p := filepath.Join(filepath.Dir(self), "termgate"); isFile(p) {
			return p
		}
	}
	if isFile("bin/termgate") {
		return "bin/termgate"
	}
	return ""
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}
