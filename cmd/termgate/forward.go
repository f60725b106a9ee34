package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/termgate/termgate/gateway/client"
)

// forwardOptions are the flags of termgate forward.
type forwardOptions struct {
	clientFlags
	address string
}

func forwardFlags(o *forwardOptions) *flag.FlagSet {
	fs := newClientFlagSet("forward", &o.clientFlags)
	fs.StringVar(&o.address, "address", "127.0.0.1", "the local `ADDRESS` to listen on")
	o.reconnectFlag(fs)
	return fs
}

// portPair is one [LOCAL:]REMOTE operand of termgate forward.
type portPair struct{ local, remote int }

// parsePortPair reads [LOCAL:]REMOTE: LOCAL 0 picks a free port; without
// it, the local port is the remote one.
func parsePortPair(s string) (portPair, error) {
	l, r, two := strings.Cut(s, ":")
	if !two {
		l, r = s, s
	}
	local, err1 := strconv.ParseUint(l, 10, 16)
	remote, err2 := strconv.ParseUint(r, 10, 16)
	if err1 != nil || err2 != nil || remote == 0 {
		return portPair{}, fmt.Errorf("%q: want [LOCAL:]REMOTE, ports from 1 to 65535 (LOCAL 0 picks one)", s)
	}
	return portPair{int(local), int(remote)}, nil
}

// runForward listens on local ports and forwards each connection to a
// port in an execution's sandbox, until interrupted. A gateway that goes
// away is reconnected to; the listeners stay, connections open then
// end, and new ones go through the new connection.
func runForward(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	var o forwardOptions
	fs := forwardFlags(&o)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() < 2 {
		return usageError{errors.New("forward: want an execution ID and at least one [LOCAL:]REMOTE port")}
	}
	if err := o.checkReconnect(); err != nil {
		return err
	}
	id := fs.Arg(0)
	var pairs []portPair
	for _, a := range fs.Args()[1:] {
		p, err := parsePortPair(a)
		if err != nil {
			return usageError{fmt.Errorf("forward: %w", err)}
		}
		pairs = append(pairs, p)
	}
	c, err := o.dial(ctx)
	if err != nil {
		return o.failure(err, id)
	}
	defer c.Close()
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for _, p := range pairs {
		ln, err := net.Listen("tcp", net.JoinHostPort(o.address, strconv.Itoa(p.local)))
		if err != nil {
			return fmt.Errorf("forward: listen on %s port %d: %w", o.address, p.local, err)
		}
		lns = append(lns, ln)
		fmt.Fprintf(stdout, "Forwarding from %s -> %s:%d\n", ln.Addr(), id, p.remote)
	}
	var wg sync.WaitGroup
	for i, ln := range lns {
		wg.Go(func() { acceptForward(ctx, c, ln, id, pairs[i].remote, stderr) })
	}
	go func() {
		<-ctx.Done()
		for _, ln := range lns {
			ln.Close()
		}
	}()
	wg.Wait()
	return nil
}

// acceptForward serves ln until it is closed: each connection gets a
// stream to port.
func acceptForward(ctx context.Context, c *client.Client, ln net.Listener, id string, port int, stderr io.Writer) {
	var conns sync.WaitGroup
	defer conns.Wait()
	for {
		local, err := ln.Accept()
		if err != nil {
			return
		}
		conns.Go(func() {
			defer local.Close()
			remote, err := c.Forward(ctx, id, port)
			if err != nil {
				fmt.Fprintf(stderr, "termgate: forward to %s:%d: %v\n", id, port, err)
				return
			}
			defer remote.Close()
			splice(local, remote)
		})
	}
}

// splice copies both ways until both ends are done, passing each
// half-close on.
func splice(a net.Conn, b *client.ForwardConn) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		io.Copy(a, b)
		if tc, ok := a.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
	}()
	io.Copy(b, a)
	b.CloseWrite()
	<-done
}

// runPorts lists the TCP ports an execution's programs listen on.
func runPorts(ctx context.Context, args []string, _ io.Reader, stdout, _ io.Writer) error {
	var cf clientFlags
	fs := newClientFlagSet("ports", &cf)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError{errors.New("ports: want an execution ID")}
	}
	var answer struct {
		Ports []struct {
			Address string `json:"address"`
			Port    int    `json:"port"`
		} `json:"ports"`
	}
	if err := cf.apiGet(ctx, "/v1/executions/"+url.PathEscape(fs.Arg(0))+"/ports", &answer); err != nil {
		return err
	}
	for _, p := range answer.Ports {
		fmt.Fprintf(stdout, "%d\t%s\n", p.Port, p.Address)
	}
	return nil
}

// previewOptions are the flags of termgate preview.
type previewOptions struct {
	clientFlags
	ttl    time.Duration
	revoke bool
}

func previewFlags(o *previewOptions) *flag.FlagSet {
	fs := newClientFlagSet("preview", &o.clientFlags)
	fs.DurationVar(&o.ttl, "ttl", time.Hour, "how long the preview lives (1s to 24h)")
	fs.BoolVar(&o.revoke, "revoke", false, "revoke the port's previews instead")
	return fs
}

// runPreview prints the URL of a new preview of a port, or revokes the
// port's previews.
func runPreview(ctx context.Context, args []string, _ io.Reader, stdout, _ io.Writer) error {
	var o previewOptions
	fs := previewFlags(&o)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		return usageError{errors.New("preview: want an execution ID and a port")}
	}
	port, err := strconv.ParseUint(fs.Arg(1), 10, 16)
	if err != nil || port == 0 {
		return usageError{fmt.Errorf("preview: port %q: want a number from 1 to 65535", fs.Arg(1))}
	}
	if o.ttl < time.Second || o.ttl > 24*time.Hour {
		return usageError{fmt.Errorf("preview: --ttl %v: want 1s to 24h", o.ttl)}
	}
	path := "/v1/executions/" + url.PathEscape(fs.Arg(0)) + "/ports/" + strconv.Itoa(int(port)) + "/preview"
	if o.revoke {
		return o.apiCall(ctx, http.MethodDelete, path, nil, nil)
	}
	var p struct {
		URL       string `json:"url"`
		ExpiresAt string `json:"expires_at"`
	}
	if err := o.apiCall(ctx, http.MethodPost, path, map[string]int64{"ttl_seconds": int64(o.ttl / time.Second)}, &p); err != nil {
		return err
	}
	fmt.Fprintln(stdout, p.URL)
	return nil
}
