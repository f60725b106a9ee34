//go:build linux

package sandbox

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"
)

// ProbeSockets checks that this host can open sockets in a sandbox's
// network from the host side, as a network policy's proxy needs
// (Policy.Listen, NetNS): it starts a sandbox with a listener on its
// loopback, connects to it through the sandbox's network namespace, and
// sees the connection accepted. The error says what is missing
// (ErrUnavailable wraps it); a server must not offer a network policy
// without it.
func (l *Launcher) ProbeSockets(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	dir, err := os.MkdirTemp("", "termgate-probe-")
	if err != nil {
		return fmt.Errorf("%w: sockets probe: %w", ErrUnavailable, err)
	}
	defer os.RemoveAll(dir)
	const addr = "127.0.0.1:3128"
	proc, err := l.Start(ctx, Policy{
		Command: []string{"/bin/sh", "-c", "read x"}, Workspace: dir, Network: NetworkNone,
		Listen: []Socket{{Network: "tcp", Addr: addr}}, Key: "probe-" + randomName(),
	}, Stdio{Stdout: io.Discard, Stderr: io.Discard})
	if err != nil {
		return fmt.Errorf("%w: sockets probe: start a sandbox with a listener: %w", ErrUnavailable, err)
	}
	defer func() {
		proc.Stop(StopCancel)
		proc.Wait()
		proc.Release()
	}()
	socks, err := proc.Sockets(ctx)
	if err != nil {
		return fmt.Errorf("%w: sockets probe: %w", ErrUnavailable, err)
	}
	defer func() {
		for _, s := range socks {
			s.Close()
		}
	}()
	ns, err := proc.NetNS()
	if err != nil {
		return fmt.Errorf("%w: sockets probe: enter the sandbox's network: %w", ErrUnavailable, err)
	}
	defer ns.Close()
	c, err := ns.Dial(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("%w: sockets probe: connect inside the sandbox's network: %w", ErrUnavailable, err)
	}
	defer c.Close()
	accepted := make(chan error, 1)
	go func() {
		a, err := socks[0].Listener.Accept()
		if err == nil {
			a.Close()
		}
		accepted <- err
	}()
	select {
	case err := <-accepted:
		if err != nil {
			return fmt.Errorf("%w: sockets probe: accept: %w", ErrUnavailable, err)
		}
		return nil
	case <-ctx.Done():
		socks[0].Listener.Close()
		<-accepted
		return fmt.Errorf("%w: sockets probe: the listener never saw the connection", ErrUnavailable)
	}
}
