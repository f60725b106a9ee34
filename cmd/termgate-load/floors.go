//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/coder/websocket"
	"github.com/creack/pty"
)

// The echo target is relative to two floors, measured here in the same
// run with the same keys: a bare PTY (cat in raw mode, its master read
// directly) and a bare WebSocket echo whose server is another process, as
// serve is to its clients. A server in the client's own process shares
// its poller and scheduler, and its round trip is about half as long.
//
// A third floor joins the two: a bare relay, the least a WebSocket
// terminal gateway written in Go does (each message written to cat's PTY,
// each read of the PTY sent back as a message, no sandbox, no protocol,
// no history), in the same server process. termgate's echo above it is
// what termgate itself adds.

// envEchoServer makes this program the floors' WebSocket server.
const envEchoServer = "TERMGATE_LOAD_ECHO_SERVER"

// floors are the echo floors' p50 and p99.
type floors struct {
	pty, ws, relay [2]time.Duration
}

// measureFloors times o.keys one-byte round trips on each floor, after
// o.warm untimed ones.
func measureFloors(ctx context.Context, o options) (floors, error) {
	var f floors
	var err error
	if f.pty, err = ptyFloor(ctx, o); err != nil {
		return f, fmt.Errorf("bare PTY: %w", err)
	}
	addr, stop, err := startFloorServer(ctx)
	if err != nil {
		return f, fmt.Errorf("floor server: %w", err)
	}
	defer stop()
	if f.ws, err = wsFloor(ctx, o, addr); err != nil {
		return f, fmt.Errorf("bare WebSocket: %w", err)
	}
	if f.relay, err = relayFloor(ctx, o, addr); err != nil {
		return f, fmt.Errorf("bare relay: %w", err)
	}
	return f, nil
}

// ptyFloor echoes through cat on a fresh PTY.
func ptyFloor(ctx context.Context, o options) ([2]time.Duration, error) {
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", "stty raw -echo; echo READY; exec cat")
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 24, Cols: 80})
	if err != nil {
		return [2]time.Duration{}, err
	}
	defer func() { cmd.Process.Kill(); f.Close(); cmd.Wait() }()
	// The master is blocking: a read waits for cat; ctx's end kills cat,
	// which ends it.
	buf := make([]byte, 4096)
	read := func(want []byte) error {
		var seen []byte
		for !bytes.Contains(seen, want) {
			n, err := f.Read(buf)
			if err != nil {
				return err
			}
			seen = append(seen[max(0, len(seen)-len(want)):], buf[:n]...)
		}
		return nil
	}
	if err := read([]byte("READY")); err != nil {
		return [2]time.Duration{}, err
	}
	return roundTrips(o, nil, func(k []byte) error {
		if _, err := f.Write(k); err != nil {
			return err
		}
		return read(k)
	})
}

// startFloorServer starts this program again as the floors' server in
// another process (serveEcho) and returns its address, and a stop that
// ends it.
func startFloorServer(ctx context.Context) (string, func(), error) {
	self, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	cmd := exec.CommandContext(ctx, self)
	cmd.Env = append(os.Environ(), envEchoServer+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe() // its end tells the server to go
	if err != nil {
		return "", nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop := func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() }
	addr, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		stop()
		return "", nil, err
	}
	return strings.TrimSpace(addr), stop, nil
}

// wsFloor echoes one-byte binary messages through the floors' server.
func wsFloor(ctx context.Context, o options, addr string) ([2]time.Duration, error) {
	c, _, err := websocket.Dial(ctx, "ws://"+addr+"/", nil)
	if err != nil {
		return [2]time.Duration{}, err
	}
	defer c.CloseNow()
	return roundTrips(o, nil, func(k []byte) error {
		if err := c.Write(ctx, websocket.MessageBinary, k); err != nil {
			return err
		}
		_, b, err := c.Read(ctx)
		if err == nil && !bytes.Equal(b, k) {
			err = fmt.Errorf("echoed %q for %q", b, k)
		}
		return err
	})
}

// relayFloor echoes one-byte binary messages through cat on a PTY that
// the floors' server relays (relay).
func relayFloor(ctx context.Context, o options, addr string) ([2]time.Duration, error) {
	c, _, err := websocket.Dial(ctx, "ws://"+addr+"/relay", nil)
	if err != nil {
		return [2]time.Duration{}, err
	}
	defer c.CloseNow()
	read := func(want []byte) error {
		var seen []byte
		for !bytes.Contains(seen, want) {
			_, b, err := c.Read(ctx)
			if err != nil {
				return err
			}
			seen = append(seen[max(0, len(seen)-len(want)):], b...)
		}
		return nil
	}
	if err := read([]byte("READY")); err != nil {
		return [2]time.Duration{}, err
	}
	return roundTrips(o, nil, func(k []byte) error {
		if err := c.Write(ctx, websocket.MessageBinary, k); err != nil {
			return err
		}
		return read(k)
	})
}

// roundTrips times o.keys calls of trip after o.warm untimed ones, each
// with one byte, and returns their p50 and p99; timed, when not nil, is
// called as the timing starts.
func roundTrips(o options, timed func(), trip func(k []byte) error) ([2]time.Duration, error) {
	rtts := make([]time.Duration, 0, o.keys)
	for i := range o.warm + o.keys {
		if i == o.warm && timed != nil {
			timed()
		}
		k := []byte{byte('a' + i%26)}
		start := time.Now()
		if err := trip(k); err != nil {
			return [2]time.Duration{}, fmt.Errorf("keystroke %d: %w", i, err)
		}
		if i >= o.warm {
			rtts = append(rtts, time.Since(start))
		}
	}
	slices.Sort(rtts)
	return [2]time.Duration{rtts[len(rtts)/2], rtts[len(rtts)*99/100]}, nil
}

// echoServerRole makes this process the floors' server, and exits, when
// startFloorServer started it as one; else it returns.
func echoServerRole() {
	if os.Getenv(envEchoServer) == "" {
		return
	}
	if err := serveEcho(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "termgate-load: echo server:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// serveEcho is the floors' server: it listens on 127.0.0.1, prints its
// address, echoes every message of each connection to / and relays each
// connection to /relay (relay), and ends when its standard input does
// (the measuring process closed it, or ended).
func serveEcho(stdin io.Reader, stdout io.Writer) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", echo)
	mux.HandleFunc("/relay", relay)
	mux.HandleFunc("/output", serveOutput)
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: mux}
	go func() {
		io.Copy(io.Discard, stdin)
		srv.Close()
	}()
	if _, err := fmt.Fprintln(stdout, ln.Addr()); err != nil {
		ln.Close()
		return err
	}
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// echo writes back every message it reads until the connection ends.
func echo(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer c.CloseNow()
	for {
		typ, b, err := c.Read(r.Context())
		if err != nil {
			return
		}
		if err := c.Write(r.Context(), typ, b); err != nil {
			return
		}
	}
}

// relay gives the connection cat in raw mode on a fresh PTY: each message
// it reads is written to the PTY, and each read of the PTY is sent back as
// a binary message, on a goroutine of its own, until either side ends.
func relay(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer c.CloseNow()
	cmd := exec.Command("/bin/sh", "-c", "stty raw -echo; echo READY; exec cat")
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 24, Cols: 80})
	if err != nil {
		c.Close(websocket.StatusInternalError, err.Error())
		return
	}
	defer func() { cmd.Process.Kill(); f.Close(); cmd.Wait() }()
	ctx := r.Context()
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := f.Read(buf)
			if err != nil || c.Write(ctx, websocket.MessageBinary, buf[:n]) != nil {
				c.CloseNow()
				return
			}
		}
	}()
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			return
		}
		if _, err := f.Write(b); err != nil {
			return
		}
	}
}
