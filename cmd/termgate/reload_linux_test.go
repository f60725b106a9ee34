package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/termgate/termgate/gateway/client"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/sandbox/sandboxtest"
)

const reloadAudience = "termgate-test"

// writePublicKey writes k's public key as a PEM file at path.
func writePublicKey(t *testing.T, path string, k *ecdsa.PrivateKey) {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// signES256 is a token of tenant acme with every scope, signed by k as kid.
func signES256(t *testing.T, k *ecdsa.PrivateKey, kid string) string {
	t.Helper()
	now := time.Now()
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{
		"sub": "alice", "tenant": "acme", "scope": allScopes, "aud": reloadAudience,
		"iat": now.Unix(), "exp": now.Add(30 * time.Minute).Unix(),
	})
	tok.Header["kid"] = kid
	s, err := tok.SignedString(k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newECKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// dialToken connects to n with tok, without retrying a refusal.
func (n *durableNode) dialToken(t *testing.T, tok string) (*client.Client, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Config{
		URL: "http://" + n.addr, MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Token:  func(context.Context) (string, error) { return tok, nil },
	})
	if err == nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

// hangup sends SIGHUP to serve and waits for the log line saying what
// the reload did (the count-th such line); serve must still run.
func (n *durableNode) hangup(want string, count int) {
	n.t.Helper()
	if err := n.cur.Process.Signal(syscall.SIGHUP); err != nil {
		n.t.Fatal(err)
	}
	if !sandboxtest.Eventually(n.t, 30*time.Second, func() bool { return strings.Count(n.logs.String(), want) >= count }) {
		n.t.Fatalf("no %q after SIGHUP: %s", want, n.logs.String())
	}
	select {
	case <-n.ended:
		n.t.Fatalf("serve ended on SIGHUP: %s", n.logs.String())
	default:
	}
}

// TestHangupReloadsKeys: SIGHUP makes a running serve re-read its key
// files: a token of the new key is accepted, of the old one refused,
// without a restart, and a running execution goes on. A bad file keeps
// the keys in use. serve starts with SIGHUP ignored (nohup), and its
// sandboxed programs still get SIGHUP at its default disposition.
func TestHangupReloadsKeys(t *testing.T) {
	serveFromEnv()
	t.Parallel()
	dir := t.TempDir()
	keyPath := filepath.Join(dir, "idp.pem")
	oldKey, newKey := newECKey(t), newECKey(t)
	writePublicKey(t, keyPath, oldKey)
	n := newDurableNode(t, "--jwt-public-key", "idp="+keyPath, "--jwt-audience", reloadAudience)
	n.startUnder("nohup")
	oldTok, newTok := signES256(t, oldKey, "idp"), signES256(t, newKey, "idp")
	c, err := n.dialToken(t, oldTok)
	if err != nil {
		t.Fatalf("the old key's token before the reload: %v", err)
	}
	if _, err := n.dialToken(t, newTok); err == nil {
		t.Fatal("the new key's token accepted before the reload")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	// A SIGHUP'd child of the sandboxed shell dies of it (129) unless
	// SIGHUP was inherited ignored.
	script := `sleep 30 & kill -HUP $!; wait $!; echo hup=$?; read line; echo got=$line`
	f := start(t, ctx, c, wire.Request{ID: "hup", Command: "/bin/sh", Args: []string{"-c", script}, Interactive: true})
	until(t, "the sandboxed sleep's status", func() bool { return strings.Contains(f.output(), "hup=") })
	if !strings.Contains(f.output(), "hup=129") {
		t.Errorf("a sandboxed program SIGHUP'd: %q, want hup=129 (SIGHUP at its default disposition)", f.output())
	}
	pid := n.cur.Process.Pid

	writePublicKey(t, keyPath, newKey)
	n.hangup(`"msg":"keys reloaded"`, 1)
	if !strings.Contains(n.logs.String(), `"msg":"keys reloaded","kids":["idp","secret"]`) {
		t.Errorf("the reload does not log the key ids: %s", n.logs.String())
	}
	if _, err := n.dialToken(t, newTok); err != nil {
		t.Errorf("the new key's token after the reload: %v", err)
	}
	if _, err := n.dialToken(t, oldTok); err == nil {
		t.Error("the old key's token accepted after the reload")
	}

	// A bad file: the error is logged and the new key stays in use.
	os.WriteFile(keyPath, []byte("not a key\n"), 0o600)
	n.hangup(`"msg":"keys not reloaded: the keys in use stay"`, 1)
	if !strings.Contains(n.logs.String(), "no PEM block") {
		t.Errorf("the failed reload does not say why: %s", n.logs.String())
	}
	if _, err := n.dialToken(t, newTok); err != nil {
		t.Errorf("the new key's token after a failed reload: %v", err)
	}

	// The execution started before the reloads runs on, on its connection.
	if _, err := f.e.WriteContext(ctx, []byte("still-here\n")); err != nil {
		t.Fatal(err)
	}
	f.ended(t, ctx)
	if !strings.Contains(f.output(), "got=still-here") || f.exit == nil || f.exit.Code != 0 {
		t.Errorf("the execution across the reloads: output %q, exit %+v", f.output(), f.exit)
	}
	if n.cur.Process.Pid != pid || strings.Contains(n.logs.String(), "restarting") {
		t.Errorf("serve restarted on SIGHUP: %s", n.logs.String())
	}
}

// TestSystemdUnitReloads: "systemctl reload" sends serve the SIGHUP that
// reloads its keys.
func TestSystemdUnitReloads(t *testing.T) {
	t.Parallel()
	code, out, stderr := runCLI(t, "", "manifest", "systemd", "--jwt-secret-file", "/etc/termgate/secret", "--workspace-root", "/var/lib/termgate/ws")
	if code != 0 {
		t.Fatalf("manifest systemd: %d %s", code, stderr)
	}
	if !strings.Contains(out, "\nExecReload=/bin/kill -HUP $MAINPID\n") {
		t.Errorf("the unit has no ExecReload sending SIGHUP:\n%s", out)
	}
}

// TestServeRefusesBadIdentityFlags: the identity flags are checked before
// anything starts.
func TestServeRefusesBadIdentityFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--jwt-jwks-url", "http://idp.example/jwks", "--jwt-audience", "a"}, "must be https"},
		{[]string{"--jwt-jwks-url", "https://idp.example/jwks"}, "--jwt-audience"},
		{[]string{"--jwt-jwks-refresh", "1s"}, "10s to 24h"},
		{[]string{"--jwt-jwks-refresh", "25h"}, "10s to 24h"},
		{[]string{"--jwt-tenant-binding", "idp"}, "SOURCE=TENANT"},
		{[]string{"--jwt-tenant-binding", "idp=Acme"}, `tenant "Acme"`},
		{[]string{"--jwt-issuer", "=idp"}, "empty issuer"},
	} {
		_, err := parseServe(append([]string{"--dev"}, tc.args...), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error saying %q", tc.args, err, tc.want)
		}
	}
	o, err := parseServe([]string{"--dev", "--jwt-issuer", "a", "--jwt-issuer", "b=kid1|https://idp.example/jwks",
		"--jwt-tenant-binding", "b=acme|beta"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := o.authConfig(nil)
	if err != nil || cfg.Issuer != "a" || len(cfg.Issuers) != 1 || cfg.Issuers[0].Name != "b" ||
		len(cfg.Issuers[0].Sources) != 2 || len(cfg.TenantBindings) != 1 || len(cfg.TenantBindings[0].Tenants) != 2 {
		t.Errorf("authConfig = %+v, %v", cfg, err)
	}
}
