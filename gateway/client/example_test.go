package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/termgate/termgate/gateway/client"
	"github.com/termgate/termgate/gateway/wire"
)

// Example runs a command through a gateway and prints its output. The
// stream continues across network failures: the client reconnects and
// resumes after the last event it delivered.
func Example() {
	ctx := context.Background()
	c, err := client.Dial(ctx, client.Config{
		URL:   "http://127.0.0.1:8080",
		Token: func(context.Context) (string, error) { return os.Getenv("TERMGATE_TOKEN"), nil },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	e, err := c.Start(ctx, wire.Request{Command: "/bin/sh", Args: []string{"-c", "echo hello"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	for {
		ev, err := e.Next(ctx)
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			fmt.Println(err)
			return
		}
		switch ev.Kind {
		case "output":
			os.Stdout.Write(ev.Data)
		case "exit":
			fmt.Println("status", ev.Exit.Status())
		}
	}
}
