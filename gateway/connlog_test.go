package gateway

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/sandbox/sandboxtest"
	"github.com/termgate/termgate/session"
	"github.com/termgate/termgate/session/sessiontest"
)

// TestConnectionLogLine: a connection's end is one log line with its
// close code, duration in seconds and bytes each way; an execution's
// start names who started it, from where, and what program; and nothing
// the server wrote holds the token.
func TestConnectionLogLine(t *testing.T) {
	t.Parallel()
	var logs sandboxtest.SyncBuffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	e := newEnvSession(t, session.Config{Launcher: &sessiontest.Launcher{}, Logger: log}, func(c *Config) { c.Logger = log })
	tok := e.token(t, "acme", allScopes...)
	c := e.dial(t, tok)
	c.send(t, wire.Request{Type: wire.TypeStart, ID: "one", Command: "/bin/sh", Attach: true})
	c.expect(t, wire.MsgStarted)
	c.close()
	var line map[string]any
	if !sandboxtest.Eventually(t, 10*time.Second, func() bool {
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, `"msg":"disconnected"`) {
				return json.Unmarshal([]byte(l), &line) == nil
			}
		}
		return false
	}) {
		t.Fatalf("no disconnected line in %s", logs.String())
	}
	in, _ := line["bytes_in"].(float64)
	out, _ := line["bytes_out"].(float64)
	d, _ := line["duration"].(float64)
	if line["close_code"] != float64(1000) || in <= 0 || out <= 0 || d <= 0 || d > 60 || line["tenant"] != "acme" || line["remote_addr"] == nil {
		t.Errorf("disconnected line %v: want close_code 1000, bytes both ways, a duration in seconds, tenant and address", line)
	}
	var started map[string]any
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `"msg":"execution started"`) {
			json.Unmarshal([]byte(l), &started)
		}
	}
	if started["execution"] != "one" || started["tenant"] != "acme" || started["subject"] != "user-acme" || started["command"] != "/bin/sh" || started["remote_addr"] == nil {
		t.Errorf("execution started line %v: want execution, tenant, subject, command and client address", started)
	}
	if strings.Contains(logs.String(), tok) || strings.Contains(logs.String(), strings.Split(tok, ".")[2]) {
		t.Error("the logs hold the token")
	}
}
