package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/termgate/termgate/gateway"
	"github.com/termgate/termgate/gateway/auth"
	"github.com/termgate/termgate/gateway/client"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/sandbox"
	"github.com/termgate/termgate/session"
)

// Example wires a gateway as termgate serve does (launcher, supervisor,
// authenticator, server, handler) on 127.0.0.1 and runs one command
// through gateway/client.
//
// It needs Linux with bubblewrap, so go test compiles it but does not run
// it (an Example cannot skip). On such a host it prints:
//
//	hello from the sandbox
//	exit status 0
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "termgate-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o711) // the sandbox identity reaches the workspaces below

	// The launcher starts bubblewrap sandboxes; the supervisor runs and
	// keeps executions on it.
	launcher, err := sandbox.NewLauncher(sandbox.Config{CgroupParent: "termgate-example"})
	if err != nil {
		log.Fatal(err)
	}
	defer launcher.Close()
	sup, err := session.New(session.Config{Launcher: session.SandboxLauncher(launcher)})
	if err != nil {
		log.Fatal(err)
	}

	// The authenticator verifies bearer tokens; here HS256 with a secret
	// file, which also lets it mint the token the client uses.
	secretFile := filepath.Join(dir, "secret")
	if err := os.WriteFile(secretFile, []byte("an example secret of at least 32 bytes\n"), 0o600); err != nil {
		log.Fatal(err)
	}
	authn, err := auth.New(auth.Config{HS256SecretFile: secretFile})
	if err != nil {
		log.Fatal(err)
	}

	// The server joins them; its Handler is built once and served.
	srv, err := gateway.NewServer(gateway.Config{Supervisor: sup, Auth: authn, WorkspaceRoot: filepath.Join(dir, "workspaces")})
	if err != nil {
		log.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	defer func() {
		// For good: the supervisor ends the executions while the server
		// sends their exits and then closes the WebSockets with 1001.
		// (srv.Restart instead closes them at once with 1012, for a server
		// whose executions live on.)
		shut := make(chan error, 1)
		go func() { shut <- srv.Shutdown(ctx) }()
		sup.Close(ctx)
		<-shut
		hs.Shutdown(ctx) // the listener and idle HTTP connections
	}()

	// A client: a token for tenant acme, then one command.
	now := time.Now()
	token, err := authn.Mint(auth.Claims{
		Subject: "example", Tenant: "acme", IssuedAt: now, ExpiresAt: now.Add(time.Hour),
		Scopes: map[string]bool{auth.ScopeCreate: true, auth.ScopeAttach: true, auth.ScopeWrite: true},
	})
	if err != nil {
		log.Fatal(err)
	}
	c, err := client.Dial(ctx, client.Config{
		URL:   "http://" + ln.Addr().String(),
		Token: func(context.Context) (string, error) { return token, nil },
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	e, err := c.Start(ctx, wire.Request{Command: "/bin/sh", Args: []string{"-c", "echo hello from the sandbox"}})
	if err != nil {
		log.Fatal(err)
	}
	for {
		ev, err := e.Next(ctx)
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			log.Fatal(err)
		}
		switch ev.Kind {
		case "output":
			os.Stdout.Write(ev.Data)
		case "exit":
			fmt.Println("exit status", ev.Exit.Status())
			return
		}
	}
}
