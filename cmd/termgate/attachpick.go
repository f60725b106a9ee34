package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// executionSummary is one of the tenant's executions as the HTTP API
// lists them (GET /v1/executions).
type executionSummary struct {
	ID      string    `json:"id"`
	Status  string    `json:"status"`
	PTY     bool      `json:"pty"`
	Started time.Time `json:"started"`
	LastSeq uint64    `json:"last_seq"`
}

// listExecutions fetches the tenant's executions, in the server's order.
func (cf clientFlags) listExecutions(ctx context.Context) ([]executionSummary, error) {
	var list struct {
		Executions []executionSummary `json:"executions"`
	}
	if err := cf.apiGet(ctx, "/v1/executions", &list); err != nil {
		return nil, err
	}
	return list.Executions, nil
}

// printExecutions writes list as a table, the one ls prints; numbered
// puts the number that picks each in front.
func printExecutions(w io.Writer, list []executionSummary, numbered bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if numbered {
		fmt.Fprint(tw, "#\t")
	}
	fmt.Fprintln(tw, "ID\tSTATUS\tPTY\tSTARTED\tLAST SEQ")
	for i, e := range list {
		if numbered {
			fmt.Fprintf(tw, "%d\t", i+1)
		}
		fmt.Fprintf(tw, "%s\t%s\t%v\t%s\t%d\n", e.ID, e.Status, e.PTY, e.Started.Local().Format(time.DateTime), e.LastSeq)
	}
	return tw.Flush()
}

// Bounds of the attach picker: a line longer than pickLineMax is no
// choice, and after pickTries answers that are none the picker gives up.
const (
	pickLineMax = 256
	pickTries   = 3
)

// errNoChoice is returned when the user picked no execution.
var errNoChoice = errors.New("attach: no execution chosen: give --id ID")

// pickExecution offers list on out and returns the ID the user picks on
// in: a number from the list, an ID, or an empty line for the newest
// running execution. It reads in one byte at a time, so nothing after the
// answer's line is taken from in: a terminal's later input stays for the
// attach.
func pickExecution(ctx context.Context, list []executionSummary, in io.Reader, out io.Writer) (string, error) {
	if len(list) == 0 {
		return "", errors.New("attach: this tenant has no executions: start one with termgate run")
	}
	fmt.Fprintln(out, "Executions of this tenant:")
	printExecutions(out, list, true)
	newest := newestRunning(list)
	prompt := "Attach to which? Type its number or ID"
	if newest >= 0 {
		prompt += fmt.Sprintf(", or Enter for the newest running (%s)", list[newest].ID)
	}
	for range pickTries {
		fmt.Fprint(out, prompt+": ")
		line, err := readLine(ctx, in)
		if err != nil {
			fmt.Fprintln(out)
			if errors.Is(err, io.EOF) {
				return "", errNoChoice
			}
			return "", err
		}
		id, why := choose(list, newest, line)
		if why == "" {
			return id, nil
		}
		fmt.Fprintln(out, why)
	}
	return "", errNoChoice
}

// choose maps one answer to an ID, or says why it names none.
func choose(list []executionSummary, newest int, line string) (id, why string) {
	line = strings.TrimSpace(line)
	if line == "" {
		if newest < 0 {
			return "", "No execution is running: type the number of one."
		}
		return list[newest].ID, ""
	}
	if n, err := strconv.Atoi(line); err == nil {
		if n < 1 || n > len(list) {
			return "", fmt.Sprintf("%d is not in the list: type a number from 1 to %d.", n, len(list))
		}
		return list[n-1].ID, ""
	}
	for _, e := range list {
		if e.ID == line {
			return e.ID, ""
		}
	}
	return "", fmt.Sprintf("%q is neither a number from the list nor an ID in it.", line)
}

// newestRunning is the index of the running execution started last, or -1.
func newestRunning(list []executionSummary) int {
	best := -1
	for i, e := range list {
		if e.Status == "running" && (best < 0 || e.Started.After(list[best].Started)) {
			best = i
		}
	}
	return best
}

// readLine reads one line from in, a byte at a time, without its end; a
// line longer than pickLineMax is read to its end and returned cut, which
// choose refuses. It returns when ctx ends (Ctrl-C at the prompt) while
// the read goes on in the background: the command is about to exit.
func readLine(ctx context.Context, in io.Reader) (string, error) {
	type result struct {
		line string
		err  error
	}
	done := make(chan result, 1)
	go func() { // owned by readLine; ends with the line, or with in
		var b strings.Builder
		one := make([]byte, 1)
		for {
			n, err := in.Read(one)
			if n == 1 && one[0] == '\n' {
				done <- result{b.String(), nil}
				return
			}
			if n == 1 && b.Len() < pickLineMax+1 {
				b.WriteByte(one[0])
			}
			if err != nil {
				if b.Len() > 0 && errors.Is(err, io.EOF) {
					err = nil
				}
				done <- result{b.String(), err}
				return
			}
		}
	}()
	select {
	case r := <-done:
		return r.line, r.err
	case <-ctx.Done():
		return "", context.Cause(ctx)
	}
}

// attachID is the execution attach follows: --id, or, on a terminal, the
// one the user picks from the tenant's list. Without either, --id is
// required, as a script must name what it attaches to.
func (o attachOptions) attachID(ctx context.Context, stdin io.Reader, stderr io.Writer) (string, error) {
	if o.id != "" {
		return o.id, nil
	}
	if in, _ := stdin.(*os.File); in == nil || !isTerminal(in) {
		return "", usageError{errors.New("attach: --id is required (without one, attach offers a list only on a terminal)")}
	}
	list, err := o.listExecutions(ctx)
	if err != nil {
		return "", err
	}
	return pickExecution(ctx, list, stdin, stderr)
}
