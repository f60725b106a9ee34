package main

import (
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
	if cf.url == "" || cf.token == "" {
		return usageError{errors.New("--url and --token (or TERMGATE_URL and TERMGATE_TOKEN) are required")}
	}
	if !strings.HasPrefix(cf.url, "http://") && !strings.HasPrefix(cf.url, "https://") {
		return usageError{fmt.Errorf("--url %q must start with http:// or https://", cf.url)}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(cf.url, "/")+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+cf.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("reach the gateway: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("read the gateway's answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error, Message string }
		if json.Unmarshal(body, &e) == nil && e.Message != "" {
			return fmt.Errorf("%s (%s)", e.Message, e.Error)
		}
		return fmt.Errorf("the gateway answered %s", resp.Status)
	}
	return json.Unmarshal(body, into)
}

// runLs lists the tenant's executions.
func runLs(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cf clientFlags
	if err := parseFlags(newClientFlagSet("ls", &cf), args); err != nil {
		return err
	}
	list, err := cf.listExecutions(ctx)
	if err != nil {
		return err
	}
	return printExecutions(stdout, list, false)
}

// logsOptions are the flags of termgate logs.
type logsOptions struct {
	clientFlags
	id     string
	after  uint64
	follow bool
}

func logsFlags(o *logsOptions) *flag.FlagSet {
	fs := newClientFlagSet("logs", &o.clientFlags)
	fs.StringVar(&o.id, "id", "", "execution `ID`")
	fs.Uint64Var(&o.after, "after", 0, "print events after this sequence number")
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
	for next := o.after; ; {
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
			NextAfter uint64 `json:"next_after"`
			Ended     bool   `json:"ended"`
		}
		q := url.Values{"after": {fmt.Sprint(next)}, "wait": {wait}}
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
		next = page.NextAfter
	}
}
