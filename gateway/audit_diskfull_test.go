package gateway

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/termgate/termgate/gateway/audit"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/sandbox/sandboxtest"
	"golang.org/x/sys/unix"
)

// envDiskFullChild marks the test binary run in a mount namespace of its
// own by TestAuditFailsClosedOnAFullDisk: the tiny tmpfs it mounts there
// goes with the namespace, whatever happens to the test.
const envDiskFullChild = "TERMGATE_TEST_AUDIT_DISK_FULL"

// TestAuditFailsClosedOnAFullDisk: with the trail's file system full,
// every request that would be recorded is refused with unavailable, over
// WebSocket and HTTP; the file keeps whole lines only (a record cut
// short at the full page is cut back); one error is logged for the
// streak; and requests succeed again once there is room.
func TestAuditFailsClosedOnAFullDisk(t *testing.T) {
	if os.Getenv(envDiskFullChild) == "" {
		sandboxtest.NeedRoot(t)
		unshare, err := exec.LookPath("unshare")
		sandboxtest.Need(t, "unshare (util-linux)", err)
		cmd := exec.CommandContext(t.Context(), unshare, "--mount", "--propagation", "private",
			os.Args[0], "-test.run=^TestAuditFailsClosedOnAFullDisk$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), envDiskFullChild+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestAuditFailsClosedOnAFullDisk") {
			t.Fatalf("in a mount namespace: %v\n%s", err, out)
		}
		return
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=64k,mode=0700"); err != nil {
		t.Fatalf("mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	e := newAuditEnv(t, audit.Config{Path: filepath.Join(dir, "audit.log")})
	tok := e.token(t, "acme", allScopes...)
	c := e.dial(t, tok)
	defer c.close()
	c.send(t, wire.Request{Type: wire.TypeStart, ID: "before", Command: "/bin/sh", PTY: &wire.Size{Rows: 24, Cols: 80}, Attach: true})
	c.expect(t, wire.MsgStarted)
	att, _ := c.expect(t, wire.MsgAttached)
	c.send(t, wire.Request{Type: wire.TypeAttach, ID: "before"})
	second, _ := c.expect(t, wire.MsgAttached)

	filler := filepath.Join(dir, "filler")
	fill(t, filler)
	// The trail's last page still has room: resizes are recorded until a
	// record does not fit, and that one is refused.
	refused := 0
	for i := 0; i < 200 && refused == 0; i++ {
		c.send(t, wire.Request{Type: wire.TypeResize, Req: "r", Channel: att.Channel, Rows: 10 + i%50, Cols: 80})
		m := answer(t, c)
		switch {
		case m.Type == wire.MsgError && m.Error == wire.CodeUnavailable:
			refused++
		case m.Type != wire.MsgOK:
			t.Fatalf("resize %d answered %+v", i, m)
		}
	}
	if refused == 0 {
		t.Fatal("200 resizes on a full disk were all recorded")
	}
	// A first input is refused as retryable, with the offset to resend
	// from, and never reaches the program.
	c.sendInput(t, second.Channel, 0, "typed")
	if m := answer(t, c); m.Error != wire.CodeUnavailable || m.Channel != second.Channel || m.InputOffset != 0 || !wire.InputRefused(m.Error) {
		t.Fatalf("a first input on a full disk answered %+v", m)
	}
	if info, _ := e.sup.Get("acme", "before"); info.InputOffset != 0 {
		t.Fatalf("the refused input reached the execution: offset %d", info.InputOffset)
	}
	c.send(t, wire.Request{Type: wire.TypeStart, Req: "s", ID: "during", Command: "/bin/sh"})
	if m, _ := c.expect(t, wire.MsgError); m.Error != wire.CodeUnavailable || m.Req != "s" {
		t.Fatalf("a start on a full disk answered %+v", m)
	}
	if st, b := e.api(t, "POST", "/v1/executions", tok, apiStart{ID: "during-http", Command: "/bin/sh"}); st != 503 || b.Error != wire.CodeUnavailable {
		t.Fatalf("an HTTP start on a full disk answered %d %+v", st, b)
	}
	if _, err := e.sup.Get("acme", "during"); err == nil {
		t.Fatal("a start whose record was not written ran")
	}
	if _, err := e.sup.Get("acme", "during-http"); err == nil {
		t.Fatal("an HTTP start whose record was not written ran")
	}
	readAudit(t, e.path, 1) // whole lines only
	if n := strings.Count(e.log.String(), "audit trail cannot be written"); n != 1 {
		t.Fatalf("%d error lines for one streak, want 1:\n%s", n, e.log.String())
	}
	if e.srv.cfg.Audit.Lost() == 0 {
		t.Error("the refusals that could not be recorded were not counted")
	}

	os.Remove(filler)
	if st, b := e.api(t, "POST", "/v1/executions", tok, apiStart{ID: "after", Command: "/bin/sh"}); st != 201 {
		t.Fatalf("a start once there is room answered %d %+v", st, b)
	}
	if !strings.Contains(e.log.String(), "audit trail written again") {
		t.Errorf("no recovery line:\n%s", e.log.String())
	}
	if len(find(readAudit(t, e.path, 1), map[string]any{"event": "start", "execution": "after", "outcome": "ok"})) != 1 {
		t.Errorf("the start after recovery is not in the trail:\n%s", e.trail(t))
	}
}

// fill writes path until its file system is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 4096)
	for i := 0; i < 1<<14; i++ {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill: %v", err)
			}
			for n := 2048; n > 0; n /= 2 { // and any part of a page left
				f.Write(chunk[:n])
			}
			return
		}
	}
	t.Fatal("the file system never filled")
}

// answer reads until the next ok or error, skipping events and output.
func answer(t *testing.T, c *client) wire.Message {
	t.Helper()
	for range 1000 {
		f, err := c.read(t.Context())
		if err != nil {
			t.Fatalf("waiting for an answer: %v", err)
		}
		if f.msg != nil && (f.msg.Type == wire.MsgOK || f.msg.Type == wire.MsgError) {
			return *f.msg
		}
	}
	t.Fatal("no answer in 1000 messages")
	return wire.Message{}
}
