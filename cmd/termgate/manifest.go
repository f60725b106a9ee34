package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
)

// manifestKinds are the configurations termgate manifest prints.
var manifestKinds = []string{"systemd", "nginx", "caddy", "kubernetes", "haproxy", "seccomp", "apparmor"}

// runManifest prints a ready configuration for running termgate serve
// under a service manager or behind a reverse proxy, generated from the
// flags given, or the seccomp and AppArmor profiles of its container:
// termgate manifest systemd|nginx|caddy|kubernetes|haproxy|seccomp|apparmor [flags].
func runManifest(_ context.Context, args []string, _ io.Reader, stdout, _ io.Writer) error {
	if len(args) == 0 {
		return usageError{errors.New("manifest: want systemd, nginx, caddy, kubernetes, haproxy, seccomp or apparmor")}
	}
	switch args[0] {
	case "-h", "-help", "--help":
		return helpRequest{manifestFlagSet()}
	case "systemd":
		return runManifestSystemd(args[1:], stdout)
	case "nginx":
		return runManifestNginx(args[1:], stdout)
	case "caddy":
		return runManifestCaddy(args[1:], stdout)
	case "kubernetes":
		return runManifestKubernetes(args[1:], stdout)
	case "haproxy":
		return runManifestHaproxy(args[1:], stdout)
	case "seccomp":
		return runManifestSeccomp(args[1:], stdout)
	case "apparmor":
		return runManifestAppArmor(args[1:], stdout)
	}
	return usageError{fmt.Errorf("manifest: unknown kind %q: want systemd, nginx, caddy, kubernetes, haproxy, seccomp or apparmor", args[0])}
}

// manifestFlagSet is what help lists for manifest: the nginx flags, the
// caddy flags of its own, the kubernetes ones, and --binary (the systemd
// unit and the kubernetes manifests take serve's flags besides).
func manifestFlagSet() *flag.FlagSet {
	fs := newFlagSet("manifest")
	nginx, _ := nginxFlags(new(nginxOptions))
	nginx.VisitAll(func(f *flag.Flag) { fs.Var(f.Value, f.Name, f.Usage) })
	caddyOwnFlags(fs, new(caddyOptions))
	kubeFlags(fs, new(kubeOptions))
	fs.String("binary", defaultBinary, "systemd: absolute path of termgate in ExecStart, first; the other flags are serve's")
	return fs
}

// manifestKindCommands are manifest's kinds as their own help shows
// them (termgate manifest KIND --help): the usage line, summary, own
// flags and examples of each, by kind.
func manifestKindCommands() map[string]command {
	kind := func(name, args, summary string, examples ...string) command {
		return command{name: "manifest " + name, args: args, summary: summary, examples: examples}
	}
	kinds := map[string]command{
		"systemd": kind("systemd", "[--binary PATH] [serve flags]",
			"print a systemd unit that runs termgate serve with the serve flags given, checked as serve checks them",
			"termgate manifest systemd --jwt-secret-file /etc/termgate/secret --workspace-root /var/lib/termgate/workspaces \\\n      > /etc/systemd/system/termgate.service",
			"termgate manifest systemd --binary /usr/bin/termgate --dev"),
		"nginx": kind("nginx", "[flags]", "print an nginx server block that proxies to termgate serve, WebSockets included",
			"termgate manifest nginx --server-name gateway.example.com > /etc/nginx/conf.d/termgate.conf"),
		"caddy": kind("caddy", "[flags]", "print a Caddyfile site that proxies to termgate serve, WebSockets included",
			"termgate manifest caddy --server-name gateway.example.com > /etc/caddy/termgate.caddy"),
		"kubernetes": kind("kubernetes", "--image IMAGE [flags] [serve flags]",
			"print the Kubernetes manifests of a termgate cluster: a ConfigMap of the serve flags given, the Services, a StatefulSet and a PodDisruptionBudget",
			"termgate manifest kubernetes --image registry.example/termgate:1.4 --namespace tools --max-running 64 > termgate.yaml"),
		"haproxy": kind("haproxy", "--server NAME=HOST:PORT... [flags]",
			"print an HAProxy configuration in front of the nodes of a termgate cluster, its timeouts sized against the nodes' --peer-timeout",
			"termgate manifest haproxy --server termgate-0=10.0.0.1:8080 --server termgate-1=10.0.0.2:8080 --bind :80 > /etc/haproxy/haproxy.cfg"),
		"seccomp": kind("seccomp", "", "print the seccomp profile of a container running termgate serve (OCI JSON, for a Localhost profile or --security-opt seccomp=FILE): the sandbox filter's refusals but for the calls serve and bwrap make",
			"termgate manifest seccomp > /var/lib/kubelet/seccomp/termgate.json",
			"podman run --security-opt seccomp=termgate.json ..."),
		"apparmor": kind("apparmor", "[--abi 4.0|3.0]", "print the AppArmor profile of a container running termgate serve, which allows the mounts and user namespaces bwrap makes",
			"termgate manifest apparmor > /etc/apparmor.d/termgate && apparmor_parser -r -W /etc/apparmor.d/termgate",
			"termgate manifest apparmor --abi 3.0                                # Debian 12, Ubuntu 22.04"),
	}
	for name, fs := range map[string]func() *flag.FlagSet{
		"systemd":    systemdFlags,
		"nginx":      func() *flag.FlagSet { fs, _ := nginxFlags(new(nginxOptions)); return fs },
		"caddy":      func() *flag.FlagSet { fs, _ := caddyFlags(new(caddyOptions)); return fs },
		"kubernetes": func() *flag.FlagSet { return kubeFlags(newFlagSet("manifest kubernetes"), new(kubeOptions)) },
		"haproxy":    func() *flag.FlagSet { fs, _ := haproxyFlags(new(haproxyOptions)); return fs },
		"seccomp":    seccompFlags,
		"apparmor":   func() *flag.FlagSet { return apparmorFlags(new(string)) },
	} {
		k := kinds[name]
		k.flags = fs
		kinds[name] = k
	}
	return kinds
}

// withServeHelp is err, from a kind that takes serve's flags after its
// own, with the help it asks for (a helpRequest, or a flagError's) listing
// own's flags and then serve's, under own's name.
func withServeHelp(err error, own *flag.FlagSet) error {
	both := func() *flag.FlagSet {
		fs := newFlagSet(strings.TrimPrefix(own.Name(), "termgate "))
		own.VisitAll(func(f *flag.Flag) { fs.Var(f.Value, f.Name, f.Usage) })
		serveFlagSet().VisitAll(func(f *flag.Flag) {
			if fs.Lookup(f.Name) == nil {
				fs.Var(f.Value, f.Name, f.Usage)
			}
		})
		return fs
	}
	var h helpRequest
	var fe flagError
	switch {
	case errors.As(err, &h):
		return helpRequest{both()}
	case errors.As(err, &fe):
		return usageError{flagError{both(), fe.err}}
	}
	return err
}

// systemdFlags is manifest systemd's own flag set; serve's follow.
func systemdFlags() *flag.FlagSet {
	fs := newFlagSet("manifest systemd")
	fs.String("binary", defaultBinary, "absolute path of termgate in ExecStart, first; the other flags are serve's")
	return fs
}

// defaultBinary is where the unit expects termgate unless --binary says.
const defaultBinary = "/usr/local/bin/termgate"

// defaultUnitStateDir is the state directory the unit gives serve, its
// RuntimeDirectory, unless the flags name one.
const defaultUnitStateDir = "/run/termgate"

// runManifestSystemd prints a systemd unit running termgate serve with
// args, after checking them as serve would.
func runManifestSystemd(args []string, stdout io.Writer) error {
	binary, serveArgs, err := splitBinary(args)
	if err != nil {
		return err
	}
	stateDir, err := checkServeArgs(serveArgs)
	if err != nil {
		return withServeHelp(err, systemdFlags())
	}
	if !stateDir {
		serveArgs = append([]string{"--state-dir", defaultUnitStateDir}, serveArgs...)
	}
	unit, err := systemdUnit(binary, serveArgs)
	if err != nil {
		return err
	}
	_, err = io.WriteString(stdout, unit)
	return err
}

// splitBinary takes a leading --binary PATH (or --binary=PATH) off args.
func splitBinary(args []string) (string, []string, error) {
	binary := defaultBinary
	switch {
	case len(args) > 0 && (args[0] == "--binary" || args[0] == "-binary"):
		if len(args) < 2 {
			return "", nil, usageError{errors.New("manifest systemd: --binary needs a path")}
		}
		binary, args = args[1], args[2:]
	case len(args) > 0 && (strings.HasPrefix(args[0], "--binary=") || strings.HasPrefix(args[0], "-binary=")):
		binary, args = args[0][strings.Index(args[0], "=")+1:], args[1:]
	}
	if !filepath.IsAbs(binary) {
		return "", nil, usageError{fmt.Errorf("manifest systemd: --binary %q: want an absolute path (systemd needs one)", binary)}
	}
	return filepath.Clean(binary), args, nil
}

// systemdUnit is the unit file running binary serve args. Why each line
// is there (or left out) is said in the unit itself, for the operator.
func systemdUnit(binary string, args []string) (string, error) {
	exec := make([]string, 0, len(args)+2)
	for _, w := range append([]string{binary, "serve"}, args...) {
		q, err := systemdQuote(w)
		if err != nil {
			return "", err
		}
		exec = append(exec, q)
	}
	return fmt.Sprintf(systemdTemplate, strings.Join(exec, " ")), nil
}

// systemdQuote quotes word for an ExecStart line: % and $ are doubled
// (no specifier or variable expansion), and a word holding a space, a
// quote, a backslash or a semicolon, or an empty one, is double-quoted
// with C escapes. Control characters have no place in a flag: an error.
func systemdQuote(word string) (string, error) {
	for _, r := range word {
		if r < 0x20 || r == 0x7f {
			return "", usageError{fmt.Errorf("manifest systemd: argument %q holds a control character", word)}
		}
	}
	w := strings.NewReplacer("%", "%%", "$", "$$").Replace(word)
	if w != "" && !strings.ContainsAny(w, " \"'\\;") {
		return w, nil
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(w) + `"`, nil
}

const systemdTemplate = `# termgate serve as a systemd service: printed by termgate manifest systemd.
# Install: save as /etc/systemd/system/termgate.service, then
#   systemctl daemon-reload && systemctl enable --now termgate
# "systemctl restart termgate" (SIGTERM) is a restart: executions live on in
# the keeper and the new serve adopts them. To end them for good, send SIGINT
# to serve alone: systemctl kill --kill-whom=main --signal=SIGINT termgate
# ("systemctl stop" leaves them to the keeper for --orphan-grace).

[Unit]
Description=termgate: commands in bubblewrap sandboxes over WebSocket
Documentation=https://github.com/termgate/termgate
After=network-online.target
Wants=network-online.target

[Service]
Type=exec
# bwrap, cgroups and workspace quotas (loop devices, mounts) need root.
User=root
ExecStart=%s
# The sandboxes are children of a keeper process that must outlive a
# restart of serve: stop only serve, never the rest of the cgroup.
KillMode=process
# SIGTERM is serve's restart: it hands the executions over and exits 0.
KillSignal=SIGTERM
# "systemctl reload termgate": serve re-reads its key files and stays up.
ExecReload=/bin/kill -HUP $MAINPID
TimeoutStopSec=60s
Restart=on-failure
RestartSec=2s
# /run/termgate holds the executions' state (rings, input, records) on
# tmpfs; it is kept across restarts and stops so the next serve adopts.
RuntimeDirectory=termgate
RuntimeDirectoryMode=0700
RuntimeDirectoryPreserve=yes
# The keeper holds every execution's terminal or pipes; each connection
# and execution takes descriptors.
LimitNOFILE=65536
UMask=0077

# Hardening that leaves bwrap working. Not set, on purpose:
# - ProtectSystem, ProtectHome, PrivateTmp, PrivateDevices, ReadWritePaths,
#   ProtectKernelTunables, ProtectKernelModules, ProtectKernelLogs,
#   ProtectControlGroups, ProtectHostname: each gives serve a private mount
#   (or UTS) namespace, a new one at every restart, while the keeper and
#   its sandboxes stay in the old one; serve also writes cgroups under
#   /sys/fs/cgroup and sets up loop devices for workspace quotas.
# - ProtectClock, DevicePolicy, DeviceAllow: a device policy denies the
#   loop devices of workspace quotas.
# - RestrictNamespaces, SystemCallFilter, CapabilityBoundingSet: bwrap needs
#   namespaces, mount, pivot_root and CAP_SYS_ADMIN (serve filters the
#   sandboxed programs' system calls itself).
# - MemoryDenyWriteExecute, RestrictAddressFamilies: inherited by every
#   sandboxed program (they would break JITs and --network host).
NoNewPrivileges=yes
LockPersonality=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes

[Install]
WantedBy=multi-user.target
`

// nginxOptions are termgate manifest nginx's flags.
type nginxOptions struct {
	serverName string
	listen     stringList
	upstream   string
}

// stringList is a flag given any number of times.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ", ") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// nginxFlags returns manifest nginx's flag set bound to o, and o.
func nginxFlags(o *nginxOptions) (*flag.FlagSet, *nginxOptions) {
	fs := newFlagSet("manifest nginx")
	fs.StringVar(&o.serverName, "server-name", "termgate.example.com", "nginx: server_name, caddy: the site's names: the gateway's public host names")
	fs.Var(&o.listen, "listen", "nginx: a listen directive's value, repeatable (default 80)")
	fs.StringVar(&o.upstream, "upstream", "127.0.0.1:8080", "nginx, caddy: HOST:PORT termgate serve --listen listens on")
	return fs, o
}

// nginxProxyTimeout is above the gateway's heartbeat (15 s pings) and
// its events long poll (60 s at most): nginx never cuts a live session.
const nginxProxyTimeout = "300s"

var (
	nginxNameSyntax   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9*._-]+( [A-Za-z0-9*._-]+)*$`) })
	nginxListenSyntax = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9.:\[\]_=]+( [A-Za-z0-9.:\[\]_=]+)*$`) })
)

// runManifestNginx prints an nginx server block proxying to termgate.
func runManifestNginx(args []string, stdout io.Writer) error {
	fs, o := nginxFlags(new(nginxOptions))
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("manifest nginx: unexpected argument %q", fs.Arg(0))}
	}
	conf, err := nginxConfig(o)
	if err != nil {
		return err
	}
	_, err = io.WriteString(stdout, conf)
	return err
}

// nginxConfig is the configuration o asks for, or a usage error naming
// the flag whose value is no nginx token.
func nginxConfig(o *nginxOptions) (string, error) {
	listen := o.listen
	if len(listen) == 0 {
		listen = stringList{"80"}
	}
	if !nginxNameSyntax().MatchString(o.serverName) {
		return "", usageError{fmt.Errorf("manifest nginx: --server-name %q: want host names separated by spaces", o.serverName)}
	}
	for _, l := range listen {
		if !nginxListenSyntax().MatchString(l) {
			return "", usageError{fmt.Errorf("manifest nginx: --listen %q: want an address or port and parameters, like 443 ssl", l)}
		}
	}
	host, port, err := net.SplitHostPort(o.upstream)
	if err != nil || host == "" || port == "" || strings.ContainsAny(o.upstream, " ;{}#$'\"\\") {
		return "", usageError{fmt.Errorf("manifest nginx: --upstream %q: want HOST:PORT", o.upstream)}
	}
	var b strings.Builder
	fmt.Fprintf(&b, nginxHead, o.upstream)
	for _, l := range listen {
		fmt.Fprintf(&b, "    listen %s;\n", l)
	}
	fmt.Fprintf(&b, nginxBody, o.serverName, nginxProxyTimeout, nginxProxyTimeout)
	return b.String(), nil
}

const nginxHead = `# termgate behind nginx: printed by termgate manifest nginx. Save it as
# /etc/nginx/conf.d/termgate.conf (it belongs in the http block), then
#   nginx -t && nginx -s reload

# WebSocket upgrade: pass the client's Upgrade on, and close otherwise.
map $http_upgrade $connection_upgrade {
    default upgrade;
    ''      close;
}

upstream termgate {
    server %s;
}

server {
`

const nginxBody = `    server_name %s;

    # TLS: fill in the paths, uncomment, and listen on 443 ssl.
    # listen 443 ssl;
    # ssl_certificate     /etc/ssl/certs/termgate.example.com.pem;
    # ssl_certificate_key /etc/ssl/private/termgate.example.com.key;
    # ssl_protocols       TLSv1.2 TLSv1.3;

    location / {
        proxy_pass http://termgate;
        proxy_http_version 1.1;
        proxy_set_header Upgrade $http_upgrade;
        proxy_set_header Connection $connection_upgrade;
        # The gateway checks a browser's Origin against Host: keep the port.
        proxy_set_header Host $http_host;
        proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
        proxy_set_header X-Forwarded-Proto $scheme;
        # Above the gateway's heartbeat (15 s pings) and long polls (60 s).
        proxy_read_timeout %s;
        proxy_send_timeout %s;
        # Output and long polls stream: nothing waits in nginx's buffers.
        proxy_buffering off;
        proxy_request_buffering off;
    }
}
`

// caddyOptions are termgate manifest caddy's flags.
type caddyOptions struct {
	serverName, upstream string
	port                 int
	bind                 string
	tlsCert, tlsKey      string
	plainHTTP            bool
}

// caddyFlags returns manifest caddy's flag set bound to o, and o.
func caddyFlags(o *caddyOptions) (*flag.FlagSet, *caddyOptions) {
	fs := newFlagSet("manifest caddy")
	fs.StringVar(&o.serverName, "server-name", "termgate.example.com", "the site's names: the gateway's public host names")
	fs.StringVar(&o.upstream, "upstream", "127.0.0.1:8080", "HOST:PORT termgate serve --listen listens on")
	caddyOwnFlags(fs, o)
	return fs, o
}

// caddyOwnFlags adds the flags only manifest caddy has.
func caddyOwnFlags(fs *flag.FlagSet, o *caddyOptions) {
	fs.IntVar(&o.port, "port", 0, "caddy: the port the site listens on (default 443, and 80 redirecting to it; 80 with --plain-http)")
	fs.StringVar(&o.bind, "bind", "", "caddy: the IP address the site listens on (default all)")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "caddy: certificate file, with --tls-key (default: automatic HTTPS, a certificate Caddy obtains and renews for each name)")
	fs.StringVar(&o.tlsKey, "tls-key", "", "caddy: the certificate's key file")
	fs.BoolVar(&o.plainHTTP, "plain-http", false, "caddy: serve plain HTTP: TLS ends in front of Caddy (or nowhere, on 127.0.0.1)")
}

// caddyPathSyntax is a file path a Caddyfile takes as one bare token.
var caddyPathSyntax = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^/[A-Za-z0-9._/@+=,-]+$`) })

// runManifestCaddy prints a Caddyfile site block proxying to termgate.
func runManifestCaddy(args []string, stdout io.Writer) error {
	fs, o := caddyFlags(new(caddyOptions))
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("manifest caddy: unexpected argument %q", fs.Arg(0))}
	}
	conf, err := caddyConfig(o)
	if err != nil {
		return err
	}
	_, err = io.WriteString(stdout, conf)
	return err
}

// checkCaddy is a usage error naming the flag whose value a Caddyfile
// cannot take as one token, or that goes against another flag.
func checkCaddy(o *caddyOptions) error {
	host, port, err := net.SplitHostPort(o.upstream)
	switch {
	case !nginxNameSyntax().MatchString(o.serverName):
		return fmt.Errorf("--server-name %q: want host names separated by spaces", o.serverName)
	case err != nil || host == "" || port == "" || strings.ContainsAny(o.upstream, " {}#\\\"'"):
		return fmt.Errorf("--upstream %q: want HOST:PORT", o.upstream)
	case o.port < 0 || o.port > 65535:
		return fmt.Errorf("--port %d: want 1 to 65535", o.port)
	case o.bind != "" && net.ParseIP(o.bind) == nil:
		return fmt.Errorf("--bind %q: want an IP address", o.bind)
	case (o.tlsCert == "") != (o.tlsKey == ""):
		return errors.New("--tls-cert and --tls-key go together")
	case o.tlsCert != "" && o.plainHTTP:
		return errors.New("--plain-http and --tls-cert exclude each other")
	}
	for _, f := range []struct{ flag, path string }{{"--tls-cert", o.tlsCert}, {"--tls-key", o.tlsKey}} {
		if f.path != "" && !caddyPathSyntax().MatchString(f.path) {
			return fmt.Errorf("%s %q: want an absolute path of letters, digits and ._/@+=,-", f.flag, f.path)
		}
	}
	return nil
}

// caddyConfig is the site block o asks for.
func caddyConfig(o *caddyOptions) (string, error) {
	if err := checkCaddy(o); err != nil {
		return "", usageError{fmt.Errorf("manifest caddy: %w", err)}
	}
	var sites []string
	for _, name := range strings.Fields(o.serverName) {
		if o.port != 0 {
			name = net.JoinHostPort(name, fmt.Sprint(o.port))
		}
		if o.plainHTTP {
			name = "http://" + name
		}
		sites = append(sites, name)
	}
	var site strings.Builder
	if o.bind != "" {
		fmt.Fprintf(&site, "\tbind %s\n", o.bind)
	}
	switch {
	case o.plainHTTP:
		site.WriteString("\t# Plain HTTP: TLS ends in front of Caddy, or nowhere (127.0.0.1 only).\n")
	case o.tlsCert != "":
		fmt.Fprintf(&site, "\t# TLS with the certificate and key given.\n\ttls %s %s\n", o.tlsCert, o.tlsKey)
	default:
		site.WriteString("\t# TLS: automatic HTTPS. Caddy obtains and renews a certificate for each\n" +
			"\t# name (ports 80 and 443 reachable from the internet, DNS pointing here)\n" +
			"\t# and redirects HTTP to HTTPS. Your own files instead: tls CERT KEY\n")
	}
	return fmt.Sprintf(caddyTemplate, strings.Join(sites, ", "), site.String(), o.upstream), nil
}

const caddyTemplate = `# termgate behind Caddy: printed by termgate manifest caddy. Save it as
# /etc/caddy/termgate.caddy and add "import termgate.caddy" to
# /etc/caddy/Caddyfile (or make it the Caddyfile), then
#   caddy validate --config /etc/caddy/Caddyfile --adapter caddyfile
#   systemctl reload caddy
#
# Caddy passes the WebSocket upgrade and Host on as they came (the gateway
# checks a browser's Origin against Host), and sets X-Forwarded-For to the
# address of its peer: a client's own header is dropped unless the servers
# option trusted_proxies names that peer (a CDN in front of Caddy). Run
# serve with --trusted-proxy and Caddy's address, so that its logs name
# the client instead of Caddy.
#
# Timeouts: Caddy's server defaults suit the long-lived connections as they
# are, so there is no servers { timeouts } block here: no read or write
# timeout cuts a WebSocket or a 60 s long poll; the gateway's 15 s
# heartbeat keeps an idle session alive through Caddy and finds dead ones.
# A reload of Caddy closes the WebSockets it proxies: termgate's clients
# reconnect and resume where they were.

%s {
%s
	reverse_proxy %s {
		# Output and long polls stream: nothing waits in Caddy's buffers.
		flush_interval -1
		# While serve restarts (SIGTERM: the executions live on), requests
		# wait up to 10 s for the next one instead of failing.
		lb_try_duration 10s
		lb_try_interval 250ms
		transport http {
			dial_timeout 5s
		}
		# /readyz answers 503 while serve is at --max-running or restarting;
		# Caddy then sends nothing there: with several upstreams, new work
		# goes to the others. With one, an attach to a running execution
		# waits for it too: use health_uri /healthz if that must not be.
		health_uri /readyz
		health_interval 5s
		health_timeout 3s
	}
}
`
