package main

import (
	"fmt"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// TestBrowserDebugsNodeThroughHostPreview: node --inspect in a sandbox,
// opened by headless Chromium through a host-based preview under
// --preview-domain localhost (which browsers resolve to loopback with
// no DNS): the preview's URL carries the gateway's port, its secret
// becomes a cookie the browser sends on the inspector's WebSocket too,
// and the page speaks the DevTools protocol to node: Runtime.evaluate
// answers from the program.
func TestBrowserDebugsNodeThroughHostPreview(t *testing.T) {
	t.Parallel()
	_, err := exec.LookPath("node")
	sandboxtest.Need(t, "node", err)
	g := startGateway(t, "--preview-domain", "localhost")
	ctx := needBrowser(t)
	tok := g.token(t, "acme", allScopes+" exec:forward")
	ran := make(chan string, 1)
	go func() {
		code, out, stderr := runCLI(t, "", "run", "--url", g.url, "--token", tok, "--id", "inspected", "--",
			"/bin/sh", "-c", "exec node --inspect=127.0.0.1:9229 -e 'globalThis.answer = 42; setInterval(() => {}, 1000)'")
		ran <- fmt.Sprintf("run: %d %q %q", code, out, stderr)
	}()
	defer runCLI(t, "", "cancel", "--url", g.url, "--token", tok, "--id", "inspected")
	if !sandboxtest.Eventually(t, 30*time.Second, func() bool {
		code, out, _ := runCLI(t, "", "ports", "--url", g.url, "--token", tok, "inspected")
		return code == 0 && strings.HasPrefix(out, "9229\t")
	}) {
		t.Fatalf("node never listened on 9229: %s", <-ran)
	}
	code, out, errs := runCLI(t, "", "preview", "--url", g.url, "--token", tok, "inspected", "9229")
	if code != 0 {
		t.Fatalf("preview: %d %q", code, errs)
	}
	u, err := url.Parse(strings.TrimSpace(out))
	gw, _ := url.Parse(g.url)
	if err != nil || !strings.HasSuffix(u.Hostname(), ".localhost") || u.Port() != gw.Port() {
		t.Fatalf("preview URL %q, want NAME.localhost on the gateway's port %s", out, gw.Port())
	}
	u.Path = "/json/list"
	openPage(t, ctx, u.String())
	// The page is the preview's origin: what a DevTools front end does
	// with the target list, it does here. node names its WebSocket by
	// the Host it was asked on (127.0.0.1:9229): the page keeps the path
	// and asks its own origin.
	start := `window.__answer = ""; (async () => {
		try {
			const [target] = await (await fetch('/json/list')).json();
			const ws = new WebSocket('ws://' + location.host + new URL(target.webSocketDebuggerUrl).pathname);
			await new Promise((ok, fail) => { ws.onopen = ok; ws.onerror = () => fail(new Error('WebSocket failed')); });
			for (let id = 1; id <= 100; id++) {
				const answer = new Promise(ok => ws.onmessage = e => { const m = JSON.parse(e.data); if (m.id === id) ok(m); });
				ws.send(JSON.stringify({id, method: 'Runtime.evaluate', params: {expression: 'globalThis.answer + 1'}}));
				const m = await answer;
				window.__answer = JSON.stringify(m.result.result.value);
				if (window.__answer === '43') break;
				await new Promise(ok => setTimeout(ok, 50));
			}
		} catch (e) { window.__answer = 'error: ' + e.message; }
	})(); true`
	poll(t, ctx, "the page's script", start, func(bool) bool { return true })
	if got := poll(t, ctx, "Runtime.evaluate's answer", `window.__answer`, func(s string) bool { return s == "43" || strings.HasPrefix(s, "error") }); got != "43" {
		t.Errorf("Runtime.evaluate through the preview answered %s, want 43", got)
	}
}

// TestBrowserDropsAFile: a file dropped on the terminal is uploaded into
// the directory the shell started in, with a notice that says so; the
// shell reads it.
func TestBrowserDropsAFile(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	ctx := needBrowser(t)
	openPage(t, ctx, g.url+"/#token="+g.token(t, "acme", allScopes+" files:read files:write"))
	awaitPrompt(t, ctx)
	drop := `(() => {
		const dt = new DataTransfer();
		dt.items.add(new File(['dropped from the page\n'], 'dropped name.txt', { type: 'text/plain' }));
		const target = document.querySelector('#terminals');
		target.dispatchEvent(new DragEvent('dragover', { dataTransfer: dt, bubbles: true, cancelable: true }));
		return !target.dispatchEvent(new DragEvent('drop', { dataTransfer: dt, bubbles: true, cancelable: true }));
	})()`
	if handled := poll(t, ctx, "the drop", drop, func(bool) bool { return true }); !handled {
		t.Fatal("the page did not take the drop")
	}
	done := poll(t, ctx, "the upload's notice", `document.querySelector('#notices [data-done]')?.dataset.done ?? ''`, func(s string) bool { return s != "" })
	if done != "ok" {
		text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('#notices').textContent`))
		t.Fatalf("the upload ended %q: %s", done, text)
	}
	typeKeys(t, ctx, "cat 'dropped name.txt'\r")
	transcript(t, ctx, "the shell reading the file", func(s string) bool { return strings.Contains(s, "dropped from the page") })
}

// TestBrowserDownloadsAFile: the Download bar fetches a file from beside
// the tab's shell and says how many bytes it handed the browser; a path
// that is not there is told as such.
func TestBrowserDownloadsAFile(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	ctx := needBrowser(t)
	openPage(t, ctx, g.url+"/#token="+g.token(t, "acme", allScopes+" files:read files:write"))
	awaitPrompt(t, ctx)
	// The marker the command prints is not in what is typed: the typed
	// line's echo must not pass for the command's end.
	typeKeys(t, ctx, "mkdir -p out && printf 'twelve bytes' > out/report.txt && echo made-$((40+2))\r")
	transcript(t, ctx, "the file made", func(s string) bool { return strings.Contains(s, "made-42") })
	download := func(p string) {
		t.Helper()
		js := fmt.Sprintf(`(() => {
			const form = document.querySelector('#download');
			if (form.hidden) document.querySelector('#download-toggle').click();
			document.querySelector('#download-path').value = %q;
			form.requestSubmit();
			return true;
		})()`, p)
		poll(t, ctx, "the download's submit", js, func(bool) bool { return true })
	}
	download("out/report.txt")
	poll(t, ctx, "the download's notice", `document.querySelector('#notices').textContent`, func(s string) bool {
		return strings.Contains(s, "out/report.txt: downloaded (12 bytes)")
	})
	download("out/missing.txt")
	poll(t, ctx, "the refusal's notice", `document.querySelector('#notices').textContent`, func(s string) bool {
		return strings.Contains(s, "out/missing.txt: not downloaded: no such file or directory")
	})
}
