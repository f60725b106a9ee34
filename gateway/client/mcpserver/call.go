package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// maxAnswer bounds a JSON answer read from the gateway.
const maxAnswer = 8 << 20

// retryDelays are the pauses before a call is sent again.
var retryDelays = []time.Duration{250 * time.Millisecond, time.Second}

// request is one HTTP API call.
type request struct {
	method, path string
	body         io.Reader // or json, marshalled
	json         any
	header       http.Header
}

// call sends r with token, again after a retryable failure (every call
// the tools make is safe to repeat: starts carry an ID, writes an offset,
// reads a sequence), and decodes a JSON answer into into (nil: none). It
// returns the answer's body when into is nil and raw is set.
func (s *Server) call(ctx context.Context, token string, r request, into any) error {
	if token == "" {
		return errNoToken
	}
	var body []byte
	if r.json != nil {
		b, err := json.Marshal(r.json)
		if err != nil {
			return err
		}
		body = b
	} else if r.body != nil {
		b, err := io.ReadAll(r.body)
		if err != nil {
			return err
		}
		body = b
	}
	var err error
	for attempt := 0; ; attempt++ {
		if err = s.once(ctx, token, r, body, into); err == nil || !retryable(err) || attempt == len(retryDelays) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(retryDelays[attempt]):
		}
	}
}

func (s *Server) once(ctx context.Context, token string, r request, body []byte, into any) error {
	req, err := http.NewRequestWithContext(ctx, r.method, s.cfg.URL+r.path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	for k, v := range r.header {
		req.Header[k] = v
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if r.json != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return fmt.Errorf("reach the gateway: %w", err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return fmt.Errorf("read the gateway's answer: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		e := &Error{Status: resp.StatusCode}
		if json.Unmarshal(answer, &struct {
			Code    *string `json:"error"`
			Message *string `json:"message"`
		}{&e.Code, &e.Message}) != nil || e.Code == "" {
			e.Code, e.Message = "internal", "the gateway answered "+resp.Status
		}
		return e
	}
	switch v := into.(type) {
	case nil:
		return nil
	case *[]byte:
		*v = answer
		return nil
	default:
		return json.Unmarshal(answer, into)
	}
}

// escapePath percent-encodes each name of a slash-separated path.
func escapePath(p string) string {
	names := strings.Split(p, "/")
	for i, n := range names {
		names[i] = url.PathEscape(n)
	}
	return strings.Join(names, "/")
}
