package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/termgate/termgate/session/execid"
)

// haproxyOptions are termgate manifest haproxy's flags.
type haproxyOptions struct {
	servers       stringList // NAME=HOST:PORT, one per node
	bind          string
	checkInterval time.Duration
	peerTimeout   time.Duration // the nodes' --peer-timeout
}

// haproxyServer is one node of --server.
type haproxyServer struct{ name, addr string }

// haproxyFlags returns manifest haproxy's flag set bound to o, and o.
func haproxyFlags(o *haproxyOptions) (*flag.FlagSet, *haproxyOptions) {
	fs := newFlagSet("manifest haproxy")
	fs.Var(&o.servers, "server", "a node: NAME=HOST:PORT, its --node name and the address its --listen serves; repeatable, at least one")
	fs.StringVar(&o.bind, "bind", ":80", "the address HAProxy listens on: [HOST]:PORT")
	fs.DurationVar(&o.checkInterval, "check-interval", time.Second, "how often HAProxy asks each node's /readyz (two failures mark it down, two answers up again)")
	fs.DurationVar(&o.peerTimeout, "peer-timeout", haproxyDefaultPeerTimeout, "the nodes' serve --peer-timeout: HAProxy waits for a node's answer three of it and a second, and for a check's one (100ms to 1m)")
	return fs, o
}

// Bounds of --check-interval: HAProxy takes milliseconds; below 100ms
// the checks are load, above a minute a dead node stays in for minutes.
const (
	haproxyMinCheck = 100 * time.Millisecond
	haproxyMaxCheck = time.Minute
)

// Default and bounds of --peer-timeout: serve's default (the gateway
// package, which builds on Linux only, holds it as DefaultPeerTimeout);
// serve takes at most a minute; below 100ms a loaded node's answers would
// be cut.
const (
	haproxyDefaultPeerTimeout = 2 * time.Second
	haproxyMinPeerTimeout     = 100 * time.Millisecond
	haproxyMaxPeerTimeout     = time.Minute
)

// haproxyServerTimeout is how long HAProxy waits for a node's answer, a
// long poll's aside: three peer timeouts and a second. A live node
// answers a request for a frozen owner itself within that (a hop waits a
// peer timeout at most; a bare ID's locate and hop take two, a keyed
// start's two probes and hop three), so only a node that is frozen or
// hung itself is cut, with HAProxy's 504.
func haproxyServerTimeout(peer time.Duration) time.Duration { return 3*peer + time.Second }

// haproxyDuration is d as HAProxy reads it: whole seconds, or milliseconds.
func haproxyDuration(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return fmt.Sprintf("%dms", d.Milliseconds())
}

// haproxyAddrSyntax is what a HOST:PORT may hold in a server or bind line.
var haproxyAddrSyntax = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]*):[0-9]{1,5}$`) })

// runManifestHaproxy prints an HAProxy configuration in front of the
// nodes of a termgate cluster.
func runManifestHaproxy(args []string, stdout io.Writer) error {
	fs, o := haproxyFlags(new(haproxyOptions))
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("manifest haproxy: unexpected argument %q", fs.Arg(0))}
	}
	conf, err := haproxyConfig(o)
	if err != nil {
		return usageError{fmt.Errorf("manifest haproxy: %w", err)}
	}
	_, err = io.WriteString(stdout, conf)
	return err
}

// haproxyServers checks --server and returns the nodes in the order given.
func haproxyServers(list []string) ([]haproxyServer, error) {
	if len(list) == 0 {
		return nil, errors.New("--server NAME=HOST:PORT is required, once per node")
	}
	seen := map[string]bool{}
	out := make([]haproxyServer, 0, len(list))
	for _, s := range list {
		name, addr, ok := strings.Cut(s, "=")
		switch {
		case !ok:
			return nil, fmt.Errorf("--server %q: want NAME=HOST:PORT", s)
		case !execid.ValidNode(name):
			return nil, fmt.Errorf("--server %q: %q is no node name (lower-case letters, digits and -, at most 63)", s, name)
		case seen[name]:
			return nil, fmt.Errorf("--server %q: node %s is given twice", s, name)
		}
		if err := checkHaproxyAddr(addr, false); err != nil {
			return nil, fmt.Errorf("--server %q: %w", s, err)
		}
		seen[name] = true
		out = append(out, haproxyServer{name, addr})
	}
	return out, nil
}

// checkHaproxyAddr checks a HOST:PORT; anyHost allows an empty host.
func checkHaproxyAddr(addr string, anyHost bool) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || !haproxyAddrSyntax().MatchString(addr) {
		return fmt.Errorf("%q: want HOST:PORT", addr)
	}
	if host == "" && !anyHost {
		return fmt.Errorf("%q: want a host before the port", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("%q: the port must be 1 to 65535", addr)
	}
	return nil
}

// haproxyConfig is the configuration o asks for.
func haproxyConfig(o *haproxyOptions) (string, error) {
	servers, err := haproxyServers(o.servers)
	if err != nil {
		return "", err
	}
	if err := checkHaproxyAddr(o.bind, true); err != nil {
		return "", fmt.Errorf("--bind %w", err)
	}
	if o.checkInterval < haproxyMinCheck || o.checkInterval > haproxyMaxCheck {
		return "", fmt.Errorf("--check-interval %v: want %v to %v", o.checkInterval, haproxyMinCheck, haproxyMaxCheck)
	}
	if o.peerTimeout < haproxyMinPeerTimeout || o.peerTimeout > haproxyMaxPeerTimeout {
		return "", fmt.Errorf("--peer-timeout %v: want %v to %v, the nodes' own", o.peerTimeout, haproxyMinPeerTimeout, haproxyMaxPeerTimeout)
	}
	var rules, lines strings.Builder
	for _, s := range servers {
		fmt.Fprintf(&rules, "    use-server %s if { path_beg /v1/executions/%s. } || { url_param(node) -m str %s }\n", s.name, s.name, s.name)
		fmt.Fprintf(&lines, "    server %s %s check inter %dms fall 2 rise 2\n", s.name, s.addr, o.checkInterval.Milliseconds())
	}
	return fmt.Sprintf(haproxyTemplate, haproxyDuration(haproxyServerTimeout(o.peerTimeout)), haproxyDuration(o.peerTimeout),
		o.bind, rules.String(), lines.String()), nil
}

const haproxyTemplate = `# termgate nodes behind HAProxy: printed by termgate manifest haproxy.
# Check and run it with
#   haproxy -c -f /etc/haproxy/haproxy.cfg && systemctl reload haproxy
#
# Any node serves any request: it proxies what belongs to another node to
# that node. This configuration saves that hop where the request says its
# node: an HTTP API path names the execution, whose canonical ID begins
# with its node ("termgate-1.q7bazk~build-42"), and a WebSocket may say
# /v1/connect?node=NAME. A page's connection carries the executions of
# every tab, on any node, in its messages: it is balanced, and relayed by
# the node it reaches. A start's key is never hashed here: termgate picks
# its node itself, so that a retry finds the first execution.
#
# A node marked down by its checks is skipped by its use-server rule: the
# request goes to a live node, which answers "unavailable" with retry
# advice until the owner is back (never "not_found"). A request sent to a
# frozen node before its checks mark it down is cut by "timeout server"
# and answered "unavailable" too.

defaults
    mode http
    # Connections to a node that does not answer fail fast.
    timeout connect 2s
    # Above the events long poll (60 s at most).
    timeout client 75s
    # A node's answer, or a WebSocket's handshake: three of the nodes'
    # --peer-timeout and a second. A live node answers for a frozen owner
    # within that by itself; a frozen or hung node is cut. Long polls
    # wait longer (the backend's set-timeout).
    timeout server %s
    # A check waits one --peer-timeout, as a node waits for a peer.
    timeout check %s
    # A WebSocket, once upgraded: well above termgate's 15 s heartbeat,
    # which finds dead connections by itself.
    timeout tunnel 1h
    timeout http-request 10s
    # A connect that fails (a node just killed, not yet marked down) is
    # retried once more on another node, which answers for the owner.
    retries 2
    option redispatch 1
    # A node cut by timeout server is answered as termgate answers for an
    # owner that does not answer: unavailable, with retry advice.
    http-error status 504 content-type "application/json; charset=utf-8" hdr Retry-After 1 string '{"error":"unavailable","message":"the node did not answer in time; retry in a few seconds"}'

frontend termgate
    bind %s
    # Only nodes sign the hop header, with their shared secret: a client's
    # own never reaches a node.
    http-request del-header Termgate-Hop
    # Run each node's serve with --trusted-proxy and HAProxy's address, so
    # that its logs, limits and audit name the client, not HAProxy; and
    # --max-conns-per-addr high enough for every client behind it.
    option forwardfor
    default_backend termgate

backend termgate
    balance leastconn
    # /readyz answers 503 while a node restarts or is at --max-running.
    option httpchk GET /readyz
    http-check expect status 200
    # An events long poll (?wait=, 60 s at most) answers when its wait ends.
    http-request set-timeout server 75s if { path_end /events } { url_param(wait) -m found }
    # So does an agent exec (yield_ms, 60 s at most).
    http-request set-timeout server 75s if { path /v1/exec } || { path_end /write }
    # Host names in the server lines are resolved once, when HAProxy starts.
%s%s`
