package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/termgate/termgate/gateway/client"
)

// exitGateway is the status of run and attach when termgate, not the
// command, failed: the gateway unreachable past --reconnect, the
// execution gone or not found, a request refused. As with ssh, 255 is
// never mistaken for the command's own status (README.md, "Exit status").
const exitGateway = 255

// clientExits is the exit status table of run and attach in their help
// and in docs/cli.md; docs/clients.md, "Exit status", has the same.
const clientExits = `  0-254  the command's own status: its exit code, 128+n for signal n
  74     the command exited 0, but output was lost (--allow-loss keeps 0)
  2      a bad command line
  255    termgate failed, not the command: the gateway unreachable for longer than
         --reconnect (the execution may still be running), the execution gone (the
         server restarted without it), lost (the server's sandbox keeper ended) or
         not found, or a request refused
`

// gatewayError is a failure of termgate itself in run or attach: one
// line on stderr, exit status 255.
type gatewayError struct{ msg string }

func (e gatewayError) Error() string { return e.msg }

// failure turns an error of run or attach that is not the command's
// status, a usage error or help into a gatewayError that says what
// happened to execution id ("" when the gateway never named it).
func (cf clientFlags) failure(err error, id string) error {
	var ee exitError
	var ue usageError
	var ge gatewayError
	var unreachable *client.UnreachableError
	switch {
	case err == nil, errors.As(err, &ee), errors.As(err, &ue), errors.As(err, &ge), errors.Is(err, errHelp):
		return err
	case errors.As(err, &unreachable):
		msg := fmt.Sprintf("gateway at %s unreachable for %v", cf.url, unreachable.For.Round(time.Second))
		if id != "" {
			msg += "; the execution may still be running: termgate attach --id " + id
		}
		return gatewayError{msg}
	case errors.Is(err, client.ErrGone):
		return gatewayError{"the server restarted and no longer has execution " + id}
	case errors.Is(err, client.ErrNotFound):
		return gatewayError{fmt.Sprintf("the gateway at %s has no execution %s (a wrong ID, another tenant's, or its retention expired)", cf.url, id)}
	}
	return gatewayError{err.Error()}
}
