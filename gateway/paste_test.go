package gateway

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	gwclient "github.com/termgate/termgate/gateway/client"
	"github.com/termgate/termgate/gateway/wire"
)

// TestPasteIntoABusyShellArrivesWhole: 512 KiB written into a shell that
// reads nothing for 3 s meets a full input buffer many times; with
// input-acks the Go client resends every refused frame and the program
// reads exactly what was pasted.
func TestPasteIntoABusyShellArrivesWhole(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	tok := e.token(t, "acme", allScopes...)
	c, err := gwclient.Dial(ctx, gwclient.Config{URL: e.http.URL, Token: func(context.Context) (string, error) { return tok, nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !c.Server().Has(wire.FeatureInputAck) {
		t.Fatalf("hello %+v lacks input-ack", c.Server())
	}
	x, err := c.Start(ctx, wire.Request{Command: "/bin/sh", Args: []string{"-c", "sleep 3; md5sum"}})
	if err != nil {
		t.Fatal(err)
	}
	paste := numbered(0, 512<<10)
	if _, err := x.WriteContext(ctx, paste); err != nil {
		t.Fatal(err)
	}
	if err := x.CloseStdin(ctx); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for {
		ev, err := x.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%v (output %q)", err, out.String())
		}
		if ev.Kind == "output" {
			out.Write(ev.Data)
		}
		if ev.Kind == "exit" {
			break
		}
	}
	sum := md5.Sum(paste)
	if want := hex.EncodeToString(sum[:]); !strings.HasPrefix(out.String(), want) {
		t.Fatalf("md5sum printed %q, want %s", out.String(), want)
	}
}
