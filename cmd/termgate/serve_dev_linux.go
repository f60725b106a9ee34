package main

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/termgate/termgate/gateway"
	"github.com/termgate/termgate/gateway/auth"
)

// devDefaults fills in what --dev provides: a generated secret and a
// workspace root in the state directory.
func (o *serveOptions) devDefaults() error {
	state, err := stateDir()
	if err != nil {
		return err
	}
	if o.workspaceRoot == "" {
		o.workspaceRoot = filepath.Join(state, "workspaces")
	}
	if o.secretFile == "" && len(o.publicKeys) == 0 {
		o.secretFile = filepath.Join(state, "dev-secret")
		if ownPrivateFile(o.secretFile) {
			// Kept across restarts, so that the tokens it signed, and so
			// the clients of executions that outlive a restart, stay valid.
			return nil
		}
		secret := make([]byte, 32)
		rand.Read(secret)
		hex := fmt.Sprintf("%x\n", secret)
		// A fresh file each time: writing over an old one would keep its
		// mode and owner, which the authenticator may refuse.
		if err := os.Remove(o.secretFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("serve: replace dev secret: %w", err)
		}
		if err := writeNewFile(o.secretFile, []byte(hex), 0o600); err != nil {
			return fmt.Errorf("serve: write dev secret: %w", err)
		}
	}
	return nil
}

// ownPrivateFile reports whether path is a regular file of this user's
// that nobody else can read or write.
func ownPrivateFile(path string) bool {
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Geteuid()
}

// writeNewFile creates path, which must not exist, with mode perm.
func writeNewFile(path string, data []byte, perm os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	return errors.Join(err, f.Close())
}

// stateDir is $XDG_STATE_HOME/termgate, ~/.local/state/termgate, or, for
// root, /var/lib/termgate: a root home directory is closed to the sandbox
// identity, which must reach the workspaces. Created searchable (0711).
func stateDir() (string, error) {
	dir := "/var/lib/termgate"
	if x := os.Getenv("XDG_STATE_HOME"); x != "" {
		dir = filepath.Join(x, "termgate")
	} else if os.Geteuid() != 0 {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("serve: find the state directory: %w", err)
		}
		dir = filepath.Join(home, ".local", "state", "termgate")
	}
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return "", fmt.Errorf("serve: create state directory: %w", err)
	}
	return dir, os.Chmod(dir, 0o711)
}

// printDevURL mints a day-long token for the dev tenant and prints the URL
// that opens a terminal with it, then the export lines that point the
// client commands at this server.
func (o *serveOptions) printDevURL(w io.Writer, authn *auth.Authenticator, addr string) error {
	now := time.Now()
	tok, err := authn.Mint(auth.Claims{
		Subject: "dev", Tenant: o.devTenant, IssuedAt: now, ExpiresAt: now.Add(24 * time.Hour),
		Scopes: map[string]bool{auth.ScopeCreate: true, auth.ScopeAttach: true, auth.ScopeWrite: true, gateway.ScopeForward: true, gateway.ScopeFilesRead: true, gateway.ScopeFilesWrite: true},
	})
	if err != nil {
		return fmt.Errorf("serve: mint dev token: %w", err)
	}
	scheme := "http"
	if o.tlsCert != "" {
		scheme = "https"
	}
	base := scheme + "://" + addr
	fmt.Fprintf(w, "termgate dev mode: open\n\n  %s/#token=%s\n\n"+
		"or, for the client commands (termgate run, attach, ls, logs; the token is valid 24h):\n\n"+
		"  export TERMGATE_URL=%s\n  export TERMGATE_TOKEN=%s\n\nWorkspaces: %s\n", base, tok, base, tok, o.workspaceRoot)
	return nil
}
