package main

import (
	"context"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/termgate/termgate/gateway/client"
	"github.com/termgate/termgate/gateway/wire"
)

// TestBrowserDownloadsARecording: the list offers a recorded execution's
// recording, and its button hands the browser the asciicast file.
func TestBrowserDownloadsARecording(t *testing.T) {
	g := startGateway(t, "--recordings-dir", t.TempDir())
	ctx := needBrowser(t)
	owner, err := client.Dial(t.Context(), client.Config{URL: g.url, Token: func(context.Context) (string, error) {
		return g.token(t, "acme", allScopes+" exec:record"), nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { owner.Close() })
	for _, id := range []string{"recorded", "plain"} {
		req := wire.Request{ID: id, Command: "/bin/sh", Args: []string{"-c", "echo recorded-$((6*7)); sleep 600"},
			PTY: &wire.Size{Rows: 24, Cols: 80}, Record: id == "recorded"}
		e, err := owner.Start(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		e.Detach(t.Context())
	}
	openPage(t, ctx, g.url+"/#token="+g.token(t, "acme", allScopes))
	poll(t, ctx, "the recorded shell listed", rowJS("recorded"), func(r []string) bool { return len(r) == 2 })
	// The browser's download is caught where the page hands it over.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`URL.createObjectURL = (b) => { b.text().then((s) => { window.__cast = s; }); return 'blob:caught'; };
HTMLAnchorElement.prototype.click = function () { window.__saved = this.download; }; true`)); err != nil {
		t.Fatal(err)
	}
	buttons := poll(t, ctx, "the rows' buttons", `[...document.querySelectorAll('#executions tr[data-id] .recording')].map((b) => b.closest('tr').dataset.id)`,
		func(ids []string) bool { return len(ids) > 0 })
	if strings.Join(buttons, ",") != "recorded" {
		t.Errorf("recording buttons on %q, want only on recorded", buttons)
	}
	click(t, ctx, `#executions tr[data-id="recorded"] .recording`)
	cast := poll(t, ctx, "the downloaded recording", `window.__cast ?? ""`, func(s string) bool { return strings.Contains(s, "recorded-42") })
	if !strings.HasPrefix(cast, `{"version":2,"width":80,"height":24,`) {
		t.Errorf("downloaded %q", cast)
	}
	if name, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`window.__saved ?? ""`)); name != "recorded.cast" {
		t.Errorf("saved as %q", name)
	}
}
