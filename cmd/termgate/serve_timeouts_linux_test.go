package main

import (
	"bytes"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/termgate/termgate/session"
)

// TestServeTimeoutFlags: the batch and interactive timeouts and the
// warning reach the gateway and the supervisor, show in the startup log,
// and refuse values that make no sense.
func TestServeTimeoutFlags(t *testing.T) {
	t.Parallel()
	o, err := parseServe([]string{"--dev"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.policy.DefaultTimeout != session.DefaultTimeout || o.policy.InteractiveTimeout != session.DefaultInteractiveTimeout ||
		o.policy.IdleTimeout != session.DefaultIdleTimeout || o.timeoutWarning != session.DefaultTimeoutWarning {
		t.Errorf("defaults: timeout %v, interactive %v, idle %v, warning %v", o.policy.DefaultTimeout, o.policy.InteractiveTimeout, o.policy.IdleTimeout, o.timeoutWarning)
	}
	var buf bytes.Buffer
	o.logConfig(slog.New(slog.NewJSONHandler(&buf, nil)))
	for _, w := range []string{`"timeout":"2m"`, `"interactive_timeout":"12h"`, `"interactive_idle_timeout":"30m"`, `"timeout_warning":"1m"`} {
		if !strings.Contains(buf.String(), w) {
			t.Errorf("config log lacks %s: %s", w, buf.String())
		}
	}
	o, err = parseServe([]string{"--dev", "--interactive-timeout", "2h", "--interactive-idle-timeout", "5m", "--timeout-warning", "0s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	o.wireTimeouts()
	if o.policy.InteractiveTimeout != 2*time.Hour || o.policy.IdleTimeout != 5*time.Minute ||
		o.session.DefaultInteractiveTimeout != 2*time.Hour || o.session.DefaultIdleTimeout != 5*time.Minute || o.session.TimeoutWarning >= 0 {
		t.Errorf("set: gateway %+v, session interactive %v idle %v warning %v", o.policy, o.session.DefaultInteractiveTimeout, o.session.DefaultIdleTimeout, o.session.TimeoutWarning)
	}
	for _, args := range [][]string{
		{"--dev", "--interactive-idle-timeout", "0s"},
		{"--dev", "--interactive-timeout", "-1s"},
		{"--dev", "--interactive-timeout", "48h"}, // beyond --max-timeout
		{"--dev", "--timeout-warning", "-1s"},
	} {
		if _, err := parseServe(args, io.Discard); err == nil {
			t.Errorf("%q accepted", args)
		}
	}
}
