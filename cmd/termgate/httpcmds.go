package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// apiGet calls the gateway's HTTP API and decodes its JSON answer.
func (cf clientFlags) apiGet(ctx context.Context, path string, into any) error {
	return cf.apiCall(ctx, http.MethodGet, path, nil, into)
}

// apiCall makes a request of the gateway's HTTP API with a JSON body
// (nil: none) and decodes its JSON answer (into nil: none).
func (cf clientFlags) apiCall(ctx context.Context, method, path string, body any, into any) error {
	if cf.url == "" || cf.token == "" {
		return usageError{errors.New("--url and --token (or TERMGATE_URL and TERMGATE_TOKEN) are required")}
	}
	if !strings.HasPrefix(cf.url, "http://") && !strings.HasPrefix(cf.url, "https://") {
		return usageError{fmt.Errorf("--url %q must start with http:// or https://", cf.url)}
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(cf.url, "/")+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+cf.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("reach the gateway: %w", err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("read the gateway's answer: %w", err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		var e struct{ Error, Message string }
		if json.Unmarshal(answer, &e) == nil && e.Message != "" {
			return fmt.Errorf("%s (%s)", e.Message, e.Error)
		}
		return fmt.Errorf("the gateway answered %s", resp.Status)
	}
	if into == nil {
		return nil
	}
	return json.Unmarshal(answer, into)
}

// runLs lists the tenant's executions.
func runLs(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cf clientFlags
	fs := newClientFlagSet("ls", &cf)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	p, exec, files := remoteArg(fs.Arg(0))
	cf.exec = exec
	switch {
	case fs.NArg() > 1 || fs.NArg() == 1 && !files:
		return usageError{errors.New("ls: want no argument (the executions), :PATH (a workspace directory) or ID:PATH (one beside an execution)")}
	case files:
		return cf.runLsFiles(ctx, p, stdout)
	}
	var page executionList
	if err := cf.apiGet(ctx, "/v1/executions", &page); err != nil {
		return err
	}
	if err := printExecutions(stdout, page.Executions, false); err != nil {
		return err
	}
	page.warnPartial(stderr)
	return nil
}

// executionList is GET /v1/executions' answer. With many nodes it is
// partial when some did not answer in time, and names them.
type executionList struct {
	Executions  []executionSummary `json:"executions"`
	Partial     bool               `json:"partial"`
	Unreachable []string           `json:"unreachable"`
}

// warnPartial says on w which nodes a partial list lacks: their
// executions exist but are not shown. The list itself is still an answer.
func (l executionList) warnPartial(w io.Writer) {
	if !l.Partial {
		return
	}
	nodes := "some nodes"
	if len(l.Unreachable) > 0 {
		// Names come from the server: no control character reaches the
		// terminal.
		nodes = strings.Map(func(r rune) rune {
			if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
				return '?'
			}
			return r
		}, strings.Join(l.Unreachable, ", "))
	}
	fmt.Fprintf(w, "termgate: partial list: %s did not answer\n", nodes)
}

// logsOptions are the flags of termgate logs.
type logsOptions struct {
	clientFlags
	id          string
	after       uint64
	incarnation string
	follow      bool
}

func logsFlags(o *logsOptions) *flag.FlagSet {
	fs := newClientFlagSet("logs", &o.clientFlags)
	fs.StringVar(&o.id, "id", "", "execution `ID`")
	fs.Uint64Var(&o.after, "after", 0, "print events after this sequence number; needs --incarnation")
	fs.StringVar(&o.incarnation, "incarnation", "", "the execution's `incarnation` that --after counts in (as for attach): the ID may name a new execution since")
	fs.BoolVar(&o.follow, "follow", false, "keep printing until the execution ends")
	return fs
}

// runLogs prints an execution's retained output, and with --follow keeps
// printing until it ends.
func runLogs(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o logsOptions
	if err := parseFlags(logsFlags(&o), args); err != nil {
		return err
	}
	if o.id == "" {
		return usageError{errors.New("logs: --id is required")}
	}
	if o.after > 0 && o.incarnation == "" {
		return usageError{errors.New("logs: --after needs --incarnation: the ID may name a new execution since, whose first events --after would skip")}
	}
	for next, incarnation := o.after, o.incarnation; ; {
		wait := "0s"
		if o.follow {
			wait = "25s"
		}
		var page struct {
			Events []struct {
				Kind   string `json:"kind"`
				Stream string `json:"stream"`
				Data   string `json:"data"`
			} `json:"events"`
			Gap *struct {
				Bytes uint64 `json:"bytes"`
			} `json:"gap"`
			NextAfter   uint64 `json:"next_after"`
			Ended       bool   `json:"ended"`
			Incarnation string `json:"incarnation"`
		}
		q := url.Values{"after": {fmt.Sprint(next)}, "wait": {wait}}
		if next > 0 {
			q.Set("incarnation", incarnation)
		}
		if err := o.apiGet(ctx, "/v1/executions/"+url.PathEscape(o.id)+"/events?"+q.Encode(), &page); err != nil {
			return err
		}
		if page.Gap != nil {
			fmt.Fprintf(stderr, "termgate: %d bytes of output are no longer retained\n", page.Gap.Bytes)
		}
		for _, ev := range page.Events {
			if ev.Kind != "output" {
				continue
			}
			data, err := base64.StdEncoding.DecodeString(ev.Data)
			if err != nil {
				return fmt.Errorf("decode output: %w", err)
			}
			if ev.Stream == "stderr" {
				stderr.Write(data)
			} else {
				stdout.Write(data)
			}
		}
		if page.Ended || (!o.follow && page.NextAfter == next) {
			return nil
		}
		next, incarnation = page.NextAfter, page.Incarnation
	}
}
