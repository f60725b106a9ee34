//go:build linux

package main

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/termgate/termgate/gateway/cluster"
)

// writeNodeSecret writes a node secret of mode perm in dir.
func writeNodeSecret(t *testing.T, dir string, perm os.FileMode) string {
	t.Helper()
	path := filepath.Join(dir, "node-secret")
	if err := os.WriteFile(path, []byte("a-node-secret-of-more-than-32-bytes-0123456789\n"), perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, perm); err != nil { // past the umask
		t.Fatal(err)
	}
	return path
}

// TestServeClusterFlagsRefuseBadValues: each cluster misconfiguration is a
// usage error naming the flag, before anything starts.
func TestServeClusterFlagsRefuseBadValues(t *testing.T) {
	secret := writeNodeSecret(t, t.TempDir(), 0o600)
	node := []string{"--dev", "--node", "n0", "--node-secret-file", secret}
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"bad node name", []string{"--dev", "--node", "Node_0", "--node-secret-file", secret}, "--node"},
		{"node name too long", []string{"--dev", "--node", strings.Repeat("n", 64), "--node-secret-file", secret}, "--node"},
		{"peer URL with a path", append(node, "--peer", "n1=http://127.0.0.2:8080/gw"), "path"},
		{"peer URL of another scheme", append(node, "--peer", "n1=ftp://127.0.0.2:8080"), "http or https"},
		{"peer without URL", append(node, "--peer", "n1"), "NAME=URL"},
		{"peer listed twice", append(node, "--peer", "n1=http://127.0.0.2:8080", "--peer", "n1=http://127.0.0.3:8080"), "twice"},
		{"bad peer name", append(node, "--peer", "N1=http://127.0.0.2:8080"), "peer"},
		{"peer and peer-dns together", append(node, "--peer", "n1=http://127.0.0.2:8080", "--peer-dns", "termgate-headless.default.svc.cluster.local"), "exclude"},
		{"peer-port without peer-dns", append(node, "--peer-port", "8080"), "--peer-dns"},
		{"bad peer-port", append(node, "--peer-dns", "h.example", "--peer-port", "70000"), "port"},
		{"bad peer-scheme", append(node, "--peer-dns", "h.example", "--peer-scheme", "ftp"), "scheme"},
		{"peer-dns with a path", append(node, "--peer-dns", "h.example/x"), "--peer-dns"},
		{"peer-dns and a listen port of 0", append(node, "--peer-dns", "h.example", "--listen", "127.0.0.1:0"), "--peer-port"},
		{"missing secret", []string{"--dev", "--node", "n0"}, "--node-secret-file"},
		{"peers without node", []string{"--dev", "--peer", "n1=http://127.0.0.2:8080"}, "--node"},
		{"secret without node", []string{"--dev", "--node-secret-file", secret}, "--node"},
		{"zero peer timeout", append(node, "--peer-timeout", "0s"), "--peer-timeout"},
		{"long dial timeout", append(node, "--peer-dial-timeout", "2m"), "--peer-dial-timeout"},
		{"fast pings", append(node, "--peer-ping", "1ms"), "--peer-ping"},
		{"bad sigterm", []string{"--dev", "--sigterm", "stop"}, "--sigterm"},
	} {
		_, err := parseServe(c.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %q: got %v, want an error naming %q", c.name, c.args, err, c.want)
			continue
		}
		if _, ok := err.(usageError); !ok {
			t.Errorf("%s: %T %v is no usage error", c.name, err, err)
		}
	}
}

// TestServeClusterFlagsFromEnvironment: the cluster flags come from
// TERMGATE_* as every serve flag does, a flag winning.
func TestServeClusterFlagsFromEnvironment(t *testing.T) {
	secret := writeNodeSecret(t, t.TempDir(), 0o600)
	t.Setenv("TERMGATE_NODE", "termgate-1")
	t.Setenv("TERMGATE_NODE_SECRET_FILE", secret)
	t.Setenv("TERMGATE_PEER_DNS", "termgate-headless.ns.svc.cluster.local")
	t.Setenv("TERMGATE_PEER_PORT", "9000")
	t.Setenv("TERMGATE_PEER_TIMEOUT", "3s")
	t.Setenv("TERMGATE_SIGTERM", "shutdown")
	o, err := parseServe([]string{"--dev", "--peer-ping", "1s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	c := o.cluster
	if c.node != "termgate-1" || c.peerDNS != "termgate-headless.ns.svc.cluster.local" || c.peerPort != 9000 ||
		c.timeout != 3*time.Second || c.ping != time.Second || c.dialTimeout != time.Second || o.sigterm != "shutdown" {
		t.Fatalf("from the environment: %+v sigterm %q", c, o.sigterm)
	}
}

// TestBuildClusterStatic: a static peer list gives the members, this node
// included; the epoch is kept in the state directory across starts, and
// the log names node, epoch and members.
func TestBuildClusterStatic(t *testing.T) {
	dir, state := t.TempDir(), t.TempDir()
	secret := writeNodeSecret(t, dir, 0o600)
	args := []string{"--dev", "--node", "n0", "--node-secret-file", secret, "--state-dir", state,
		"--peer", "n0=http://127.0.0.1:8080", "--peer", "n1=http://127.0.0.2:8080", "--peer", "n2=http://127.0.0.3:8080",
		"--peer-timeout", "1500ms", "--peer-ping", "250ms"}
	o, err := parseServe(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	cfg, run, err := buildCluster(o, slog.New(slog.NewJSONHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	run(t.Context()) // static: returns at once
	if got := cfg.Members.Members(); !slices.Equal(got, []string{"n0", "n1", "n2"}) {
		t.Errorf("members %q", got)
	}
	if u, ok := cfg.Members.URL("n2"); !ok || u.String() != "http://127.0.0.3:8080" {
		t.Errorf("n2's URL %v %v", u, ok)
	}
	if cfg.Owner.Node != "n0" || cfg.Signer.Self() != "n0" || cfg.Timeout != 1500*time.Millisecond ||
		cfg.PingInterval != 250*time.Millisecond || cfg.DialTimeout != time.Second {
		t.Errorf("config %+v", cfg)
	}
	for _, want := range []string{`"node":"n0"`, `"epoch":"` + cfg.Owner.Epoch + `"`, `"members":["n0","n1","n2"]`, `"peer_source":"static"`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, logs.String())
		}
	}
	if strings.Contains(logs.String(), "a-node-secret") {
		t.Errorf("the log holds the node secret:\n%s", logs.String())
	}
	again, _, err := buildCluster(o, slog.New(slog.DiscardHandler))
	if err != nil || again.Owner.Epoch != cfg.Owner.Epoch {
		t.Errorf("second start: epoch %v, %v; want %s kept", again, err, cfg.Owner.Epoch)
	}
}

// TestBuildClusterRefuses: what the flags cannot say is refused when the
// files are read: a secret others may read or that is missing, and a
// state directory another node made (a volume on the wrong pod).
func TestBuildClusterRefuses(t *testing.T) {
	dir := t.TempDir()
	good := writeNodeSecret(t, dir, 0o600)
	open := filepath.Join(dir, "open-secret")
	os.WriteFile(open, []byte("a-node-secret-of-more-than-32-bytes-0123456789\n"), 0o644)
	os.Chmod(open, 0o644)
	short := filepath.Join(dir, "short-secret")
	os.WriteFile(short, []byte("short\n"), 0o600)
	other := t.TempDir()
	if _, err := cluster.LoadIdentity(other, "n7"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name        string
		secret, dir string
		want        string
	}{
		{"missing secret file", filepath.Join(dir, "absent"), t.TempDir(), "no such file"},
		{"secret others may read", open, t.TempDir(), "--node-secret-file"},
		{"short secret", short, t.TempDir(), "32"},
		{"state dir of another node", good, other, "another node"},
	} {
		o, err := parseServe([]string{"--dev", "--node", "n0", "--node-secret-file", c.secret, "--state-dir", c.dir}, io.Discard)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		_, _, err = buildCluster(o, slog.New(slog.DiscardHandler))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error with %q", c.name, err, c.want)
		}
	}
}

// TestSigtermShutdown: with --sigterm shutdown a SIGTERM stops serve for
// good, as SIGINT does; by default it is a restart.
func TestSigtermShutdown(t *testing.T) {
	for _, c := range []struct {
		shutdown    bool
		sig         os.Signal
		wantRestart bool
	}{
		{false, syscall.SIGTERM, true},
		{false, os.Interrupt, false},
		{true, syscall.SIGTERM, false},
		{true, os.Interrupt, false},
	} {
		s := &stopSignals{ch: make(chan os.Signal, 1), sigtermShutdown: c.shutdown}
		s.ch <- c.sig
		if got := s.restart(); got != c.wantRestart {
			t.Errorf("sigterm shutdown %v, %v: restart %v, want %v", c.shutdown, c.sig, got, c.wantRestart)
		}
	}
}
