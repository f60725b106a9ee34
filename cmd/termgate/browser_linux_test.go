package main

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/termgate/termgate/gateway/client"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/sandbox/sandboxtest"
	"github.com/termgate/termgate/web"
)

// needBrowser returns a headless Chromium context, skipping where Chromium
// or the built page is missing, except under CI. On failure it saves a
// screenshot as a test artifact.
func needBrowser(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil || !web.Built() {
		msg := "the browser tests need Debian's chromium and the built page (make test does both)"
		sandboxtest.Unavailable(t, "%s", msg)
	}
	// Chromium makes its singleton socket's directory in TMPDIR and leaves
	// it when killed, as the allocator's cancel does: a TMPDIR of the
	// test's own keeps /tmp clean (26 directories a run of make test).
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.UserDataDir(t.TempDir()), chromedp.Env("TMPDIR="+t.TempDir()), chromedp.WindowSize(1000, 640),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-quic", true))
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(alloc)
	// The first Run starts the browser, which lives as long as that call's
	// context: run it on ctx itself, so later calls may carry timeouts.
	if _, err := chromedp.Run(ctx, chromedp.Navigate("about:blank")); err != nil {
		cancelCtx()
		cancelAlloc()
		t.Fatalf("start chromium: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			saveScreenshot(t, ctx)
		}
		cancelCtx()
		cancelAlloc()
	})
	return ctx
}

func saveScreenshot(t *testing.T, ctx context.Context) {
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	png, err := chromedp.Run(sctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Logf("no screenshot: %v", err)
		return
	}
	dir := os.Getenv("TERMGATE_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "termgate-artifacts")
	}
	os.MkdirAll(dir, 0o755)
	file := filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_")+".png")
	if err := os.WriteFile(file, png, 0o644); err == nil {
		t.Logf("screenshot saved: %s", file)
	}
}

// poll evaluates js until cond holds for its result, or fails.
func poll[T any](t *testing.T, ctx context.Context, what, js string, cond func(T) bool) T {
	t.Helper()
	var v T
	var err error
	if !sandboxtest.Eventually(t, 90*time.Second, func() bool {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		v, err = chromedp.Run(cctx, chromedp.Evaluate[T](js))
		return err == nil && cond(v)
	}) {
		t.Fatalf("waiting for %s: last %v, %v", what, v, err)
	}
	return v
}

// awaitPrompt waits until the page is live and its shell prompts.
func awaitPrompt(t *testing.T, ctx context.Context) {
	t.Helper()
	poll(t, ctx, "live", `window.__termgate.status()`, func(s string) bool { return s == "live" })
	transcript(t, ctx, "the shell's prompt", func(s string) bool { return strings.Contains(s, "$ ") })
}

func transcript(t *testing.T, ctx context.Context, what string, cond func(string) bool) string {
	t.Helper()
	return poll(t, ctx, what, `window.__termgate.transcript()`, cond)
}

// typeKeys types into the focused terminal as a person would: text is
// inserted as by a keyboard, and each "\r" is a press of Enter. (Synthetic
// key events with text are seen twice by the terminal: keydown and char.)
func typeKeys(t *testing.T, ctx context.Context, keys string) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Focus(chromedp.CSS(".xterm-helper-textarea"))); err != nil {
		t.Fatalf("focus the terminal: %v", err)
	}
	for i, part := range strings.Split(keys, "\r") {
		if i > 0 {
			pressEnter(t, ctx)
		}
		if part == "" {
			continue
		}
		_, err := chromedp.Run(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := cdp.Call(ctx, tg, input.InsertText, input.InsertTextParams{Text: part})
			return err
		}))
		if err != nil {
			t.Fatalf("type %q: %v", part, err)
		}
	}
}

func pressEnter(t *testing.T, ctx context.Context) {
	t.Helper()
	_, err := chromedp.Run(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		for _, typ := range []input.DispatchKeyEventType{input.DispatchKeyEventTypeRawKeyDown, input.DispatchKeyEventTypeKeyUp} {
			p := input.DispatchKeyEventParams{Type: typ, Key: "Enter", Code: "Enter", WindowsVirtualKeyCode: 13}
			if _, err := cdp.Call(ctx, tg, input.DispatchKeyEvent, p); err != nil {
				return err
			}
		}
		return nil
	}))
	if err != nil {
		t.Fatalf("press Enter: %v", err)
	}
}

func openPage(t *testing.T, ctx context.Context, url string) {
	t.Helper()
	nctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := chromedp.Run(nctx, chromedp.Navigate(url)); err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
}

func TestBrowserRunsACommand(t *testing.T) {
	g := startGateway(t)
	ctx := needBrowser(t)
	began := time.Now()
	openPage(t, ctx, g.url+"/#token="+g.token(t, "acme", allScopes))
	poll(t, ctx, "live", `window.__termgate.status()`, func(s string) bool { return s == "live" })
	hash, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href`))
	if strings.Contains(hash, "token") {
		t.Errorf("the token stayed in the address bar: %s", hash)
	}
	transcript(t, ctx, "the shell's prompt", func(s string) bool { return strings.Contains(s, "$ ") })
	t.Logf("from opening the page to the shell's prompt: %v", time.Since(began).Round(time.Millisecond))
	typeKeys(t, ctx, "echo hello-$((6*7)) 'é€'\r")
	transcript(t, ctx, "the command's output", func(s string) bool { return strings.Contains(s, "hello-42 é€") })
	// A character split across output frames is shown whole: the terminal
	// decodes the stream, not each frame.
	typeKeys(t, ctx, `printf 'split-\342'; sleep 0.3; printf '\202\254-%s\n' ok`+"\r")
	poll(t, ctx, "the split character shown", `document.querySelector('.xterm-rows').textContent`,
		func(s string) bool { return strings.Contains(s, "split-€-ok") })
	if file := os.Getenv("TERMGATE_SCREENSHOT"); file != "" {
		// The picture of the page in README.md comes from here.
		time.Sleep(300 * time.Millisecond)
		if png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)); err == nil {
			os.WriteFile(file, png, 0o644)
		}
	}
	typeKeys(t, ctx, "exit 3\r")
	poll(t, ctx, "exited", `window.__termgate.status()`, func(s string) bool { return s == "exited" })
	code, _ := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS("#status"), "data-exit-code"))
	if code.Value != "3" {
		t.Errorf("exit code shown: %q", code.Value)
	}
	// The exited tab offers a new shell, in its place.
	id, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`window.__termgate.execution()`))
	click(t, ctx, ".term:not([hidden]) .new-shell")
	poll(t, ctx, "a new shell", `window.__termgate.execution() ?? ""`, func(s string) bool { return s != "" && s != id })
	poll(t, ctx, "live", `window.__termgate.status()`, func(s string) bool { return s == "live" })
	if n, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`window.__termgate.tabs().length`)); n != 1 {
		t.Errorf("%d tabs after the new shell, want 1", n)
	}
}

// TestBrowserResumesAfterServerDrops: the proxy cuts the page's
// WebSocket from the server side every 16 to 144 KiB while seq streams
// and more lines are typed; every line of seq must arrive exactly once,
// and every line typed must run exactly once.
func TestBrowserResumesAfterServerDrops(t *testing.T) {
	g := startGateway(t) // the default ring: the page acknowledges, the gateway holds the rest
	proxy := newDroppingProxySized(t, strings.TrimPrefix(g.url, "http://"), 16<<10)
	ctx := needBrowser(t)
	openPage(t, ctx, "http://"+proxy.Addr()+"/#token="+g.token(t, "acme", allScopes))
	poll(t, ctx, "live", `window.__termgate.status()`, func(s string) bool { return s == "live" })
	// The terminal does not echo while seq runs, so the lines typed
	// meanwhile stay out of seq's output; the shell runs them after it.
	typeKeys(t, ctx, "stty -echo; seq 1 200000; echo seq-done; stty echo\r")
	began := time.Now()
	// Type only once seq runs: echo is off then. On a loaded machine the
	// shell may not have run stty yet 300 ms after the Enter, and the
	// terminal would echo a typed line into seq's first.
	poll(t, ctx, "seq under way", `window.__termgate.transcript().includes("\n1000\r")`, func(b bool) bool { return b })
	for i := range 5 {
		time.Sleep(300 * time.Millisecond)
		typeKeys(t, ctx, fmt.Sprintf("echo typed-%d-$((6*7))\r", i))
	}
	poll(t, ctx, "all of seq", `window.__termgate.transcript().includes("\nseq-done")`, func(done bool) bool { return done })
	t.Logf("seq arrived in %v through %d cuts", time.Since(began).Round(time.Millisecond), proxy.Cuts())
	out, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`window.__termgate.transcript()`))
	lines := strings.Split(strings.ReplaceAll(out, "\r\n", "\n"), "\n")
	next := 1
	for _, l := range lines {
		if i := strings.LastIndexByte(l, '\r'); i >= 0 {
			l = l[i+1:] // what the terminal shows: after a carriage return
		}
		if n, err := strconv.Atoi(l); err == nil && n > 0 && n <= 200000 {
			if n != next {
				notices, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("#notices").textContent`))
				at := strings.Index(out, fmt.Sprintf("\n%d\r", next-1))
				t.Fatalf("line %d arrived where %d was due (notices %q) around %q", n, next, notices, out[max(0, at-100):min(len(out), at+300)])
			}
			next++
		}
	}
	if next != 200001 {
		t.Fatalf("got lines up to %d", next-1)
	}
	for i := range 5 {
		want := fmt.Sprintf("typed-%d-42", i)
		poll(t, ctx, want, `window.__termgate.transcript().split(`+strconv.Quote(want)+`).length - 1`, func(n int) bool { return n > 0 })
		if n, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`window.__termgate.transcript().split(`+strconv.Quote(want)+`).length - 1`)); n != 1 {
			t.Errorf("%s ran %d times", want, n)
		}
	}
	if proxy.Cuts() < 2 {
		t.Fatalf("only %d cuts: resume was not exercised", proxy.Cuts())
	}
	conns, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`window.__termgate.connections()`))
	if conns < 2 {
		t.Fatalf("the page opened %d connections", conns)
	}
}

// TestBrowserShowsReconnecting: while the gateway cannot be reached the
// status line counts down to the next attempt; when it is back the page
// is live again on the same shell.
func TestBrowserShowsReconnecting(t *testing.T) {
	g := startGateway(t)
	proxy := newDroppingProxySized(t, strings.TrimPrefix(g.url, "http://"), 1<<30)
	ctx := needBrowser(t)
	openPage(t, ctx, "http://"+proxy.Addr()+"/#token="+g.token(t, "acme", allScopes))
	awaitPrompt(t, ctx)
	typeKeys(t, ctx, "x=$((6*7))\r")
	proxy.Refuse(true)
	countdown := regexp.MustCompile(`^connection lost; reconnecting in \d+ s$`)
	poll(t, ctx, "the countdown", `document.getElementById("status").textContent`, countdown.MatchString)
	proxy.Refuse(false)
	poll(t, ctx, "live again", `window.__termgate.status()`, func(s string) bool { return s == "live" })
	typeKeys(t, ctx, "echo back-$x\r") // the same shell: x is still set
	transcript(t, ctx, "the shell's answer", func(s string) bool { return strings.Contains(s, "back-42") })
}

// TestBrowserTokenExpiry: when the page's token expires the gateway closes
// the connection, and the page says so instead of retrying a token that
// cannot work; the shell keeps running.
func TestBrowserTokenExpiry(t *testing.T) {
	// The token lives 7 to 8 s (expiry is in whole seconds): time for the
	// page to go live on a loaded machine before it expires.
	g := startGateway(t, "--jwt-leeway", "1s")
	ctx := needBrowser(t)
	code, out, stderr := runCLI(t, "", "token", "--secret-file", g.secretFile, "--tenant", "acme", "--scope", allScopes, "--ttl", "8s")
	if code != 0 {
		t.Fatalf("token: %d %s", code, stderr)
	}
	openPage(t, ctx, g.url+"/#token="+strings.TrimSpace(out))
	poll(t, ctx, "live", `window.__termgate.status()`, func(s string) bool { return s == "live" })
	id := poll(t, ctx, "the execution", `window.__termgate.execution() ?? ""`, func(s string) bool { return s != "" })
	poll(t, ctx, "expired", `window.__termgate.status()`, func(s string) bool { return s == "expired" })
	conns, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`window.__termgate.connections()`))
	time.Sleep(time.Second)
	if later, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`window.__termgate.connections()`)); later != conns {
		t.Errorf("the page went on connecting with an expired token: %d connections, then %d", conns, later)
	}
	// The shell outlives the page's token: a fresh token attaches to it.
	owner := g.owner(t)
	if _, err := owner.Attach(t.Context(), id, 0, true); err != nil {
		t.Fatalf("attach %s after the page's token expired: %v", id, err)
	}
}

// TestBrowserTokenRefused: a token the gateway does not accept (signed with
// another secret) ends in a clear status, not endless reconnecting.
func TestBrowserTokenRefused(t *testing.T) {
	g := startGateway(t)
	ctx := needBrowser(t)
	other := filepath.Join(t.TempDir(), "other-secret")
	os.WriteFile(other, []byte("another-secret-of-more-than-32-bytes-0123456789"), 0o600)
	code, out, stderr := runCLI(t, "", "token", "--secret-file", other, "--tenant", "acme")
	if code != 0 {
		t.Fatalf("token: %d %s", code, stderr)
	}
	openPage(t, ctx, g.url+"/#token="+strings.TrimSpace(out))
	poll(t, ctx, "refused", `window.__termgate.status()`, func(s string) bool { return s == "refused" })
	conns, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`window.__termgate.connections()`))
	time.Sleep(time.Second)
	if later, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`window.__termgate.connections()`)); later != conns {
		t.Errorf("the page went on connecting with a refused token: %d connections, then %d", conns, later)
	}
}

// TestBrowserDropsOnlyReplayedAnswers: the page replays history that ends
// in terminal queries (DA, DSR, cursor position, DECRQM, a colour) to a
// shell waiting in read. xterm.js answers them while replaying; those
// answers must not reach the shell, but keys typed during the replay must.
func TestBrowserDropsOnlyReplayedAnswers(t *testing.T) {
	g := startGateway(t, "--ring-bytes", "32M")
	ctx := needBrowser(t)
	owner := g.owner(t)
	// The history is long, so the replay lasts while the test types.
	// Focus events are switched on (xterm reports the focus at once) and
	// off again, far from the other queries, which xterm then parses in
	// another task. After the replay a query is answered again: the shell
	// asks the terminal live and reads the 7 bytes of the answer.
	script := `seq 1 750000; printf '\033[?1004h\033[?1004l'; seq 750001 1500000;` +
		` printf '\033[c\033[>c\033[5n\033[6n\033[?1$p\033]11;?\007'; echo queries-sent; read -r x; echo "first=[$x]"; read -r y; echo "second=[$y]";` +
		` stty -icanon -echo; printf '\033[c'; z=$(head -c 7); stty sane; echo "live=[${z#?}]"`
	e, err := owner.Start(t.Context(), wire.Request{ID: "queries", Command: "/bin/sh",
		Args: []string{"-c", script}, PTY: &wire.Size{Rows: 24, Cols: 80}})
	if err != nil {
		t.Fatal(err)
	}
	var seen []byte
	for !bytes.Contains(seen, []byte("queries-sent")) {
		ev, err := e.Next(t.Context())
		if err != nil {
			t.Fatalf("owner: %v", err)
		}
		seen = append(seen[max(0, len(seen)-64):], ev.Data...)
	}
	e.Detach(t.Context())
	openPage(t, ctx, g.url+"/#token="+g.token(t, "acme", allScopes)+"&id=queries")
	poll(t, ctx, "the replay", `window.__termgate.replaying()`, func(on bool) bool { return on })
	typeKeys(t, ctx, "hello\r")
	replaying, _ := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.__termgate.replaying()`))
	transcript(t, ctx, "the first line read", func(s string) bool { return strings.Contains(s, "first=[") })
	typeKeys(t, ctx, "world\r")
	out := transcript(t, ctx, "the live answer", func(s string) bool { return strings.Contains(s, "live=[") })
	for _, want := range []string{"first=[hello]", "second=[world]", "live=[[?1;2c]"} {
		if !strings.Contains(out, want) {
			t.Errorf("want %s in %q", want, out[max(0, len(out)-300):])
		}
	}
	if !replaying {
		t.Log("the replay ended before the keys were typed: only the dropped answers were checked")
	}
}

// TestBrowserClipboardAndLinks: output cannot write the viewer's clipboard
// (OSC 52) nor open a link by itself; a click on a link opens it in a tab
// without access to the page; the viewer can still copy a selection
// (Ctrl+Shift+C). window.open and the clipboard are recorded, not used.
// (xterm.js itself has no OSC 52 support; the page's own handler keeps an
// added clipboard addon from bringing it: this test guards the result.)
func TestBrowserClipboardAndLinks(t *testing.T) {
	g := startGateway(t)
	ctx := needBrowser(t)
	const record = `window.__opened = []; window.__copied = [];
window.open = (...a) => { window.__opened.push(a.map(String)); return null; };
if (navigator.clipboard) navigator.clipboard.writeText = (s) => { window.__copied.push(String(s)); return Promise.resolve(); };`
	_, err := chromedp.Run(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: record})
		return err
	}))
	if err != nil {
		t.Fatal(err)
	}
	openPage(t, ctx, g.url+"/#token="+g.token(t, "acme", allScopes))
	poll(t, ctx, "live", `window.__termgate.status()`, func(s string) bool { return s == "live" })
	typeKeys(t, ctx, `printf '\033]52;c;%s\007' "$(printf pwned | base64)"; echo "see https://termgate.invalid/$((6*7))/docs"; echo copy-me-$((6*7))`+"\r")
	transcript(t, ctx, "the output", func(s string) bool { return strings.Contains(s, "copy-me-42") })
	time.Sleep(300 * time.Millisecond)
	recorded := func() (opened [][]string, copied []string) {
		opened, _ = chromedp.Run(ctx, chromedp.Evaluate[[][]string](`window.__opened`))
		copied, _ = chromedp.Run(ctx, chromedp.Evaluate[[]string](`window.__copied`))
		return opened, copied
	}
	if opened, copied := recorded(); len(opened) != 0 || len(copied) != 0 {
		t.Fatalf("output alone opened %q and wrote the clipboard %q", opened, copied)
	}

	at := func(text string) (x, y float64) {
		t.Helper()
		xy := poll(t, ctx, "where "+text+" is shown", fmt.Sprintf(`(() => {
  for (const row of document.querySelectorAll('.xterm-rows > div')) {
    const w = document.createTreeWalker(row, NodeFilter.SHOW_TEXT);
    for (let n; (n = w.nextNode()); ) {
      const i = n.data.indexOf(%q);
      if (i < 0) continue;
      const r = document.createRange();
      r.setStart(n, i);
      r.setEnd(n, i + 3);
      const b = r.getBoundingClientRect();
      return [b.x + b.width / 2, b.y + b.height / 2];
    }
  }
  return [];
})()`, text), func(xy []float64) bool { return len(xy) == 2 })
		return xy[0], xy[1]
	}
	x, y := at("termgate.invalid/42")
	if _, err := chromedp.Run(ctx, chromedp.MouseEvent(chromedp.MouseMoved, x, y)); err != nil {
		t.Fatal(err)
	}
	// Links are found on hover, asynchronously; a hovered link shows the
	// pointer cursor.
	poll(t, ctx, "the link hovered", `document.querySelector(".xterm-cursor-pointer") !== null`, func(b bool) bool { return b })
	if _, err := chromedp.Run(ctx, chromedp.MouseClickXY(x, y)); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "the link opened", `window.__opened.length`, func(n int) bool { return n > 0 })
	if opened, _ := recorded(); len(opened) != 1 || fmt.Sprint(opened[0]) != "[https://termgate.invalid/42/docs _blank noopener,noreferrer]" {
		t.Errorf("a click opened %q", opened)
	}

	x, y = at("copy-me-42")
	if _, err := chromedp.Run(ctx, chromedp.MouseClickXY(x, y, chromedp.ClickCount(3))); err != nil {
		t.Fatal(err)
	}
	_, err = chromedp.Run(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		for _, typ := range []input.DispatchKeyEventType{input.DispatchKeyEventTypeRawKeyDown, input.DispatchKeyEventTypeKeyUp} {
			p := input.DispatchKeyEventParams{Type: typ, Key: "C", Code: "KeyC", WindowsVirtualKeyCode: 67,
				Modifiers: 2 | 8} // Ctrl, Shift
			if _, err := cdp.Call(ctx, tg, input.DispatchKeyEvent, p); err != nil {
				return err
			}
		}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "the copy", `window.__copied.length`, func(n int) bool { return n > 0 })
	if _, copied := recorded(); len(copied) != 1 || strings.TrimSpace(copied[0]) != "copy-me-42" {
		t.Errorf("Ctrl+Shift+C copied %q", copied)
	}

	// Copy on select, once chosen, copies a selection at once, and the
	// choice is kept.
	click(t, ctx, "#copy-on-select")
	x, y = at("copy-me-42")
	if _, err := chromedp.Run(ctx, chromedp.MouseClickXY(x, y, chromedp.ClickCount(2))); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "the copy on select", `window.__copied.length`, func(n int) bool { return n > 1 })
	if _, copied := recorded(); len(copied) < 2 || copied[1] != "copy-me-42" {
		t.Errorf("the selection copied %q", copied)
	}
	if kept, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`localStorage.getItem('termgate.copyOnSelect') ?? ''`)); kept != "1" {
		t.Errorf("copy on select kept as %q", kept)
	}
}

// TestBrowserLargeInputArrivesWhole: 200,000 characters typed at once, far
// more than the gateway queues per execution, reach the program whole and
// in order (the page sends frames and resends what the full queue refused).
func TestBrowserLargeInputArrivesWhole(t *testing.T) {
	g := startGateway(t)
	ctx := needBrowser(t)
	openPage(t, ctx, g.url+"/#token="+g.token(t, "acme", allScopes))
	poll(t, ctx, "live", `window.__termgate.status()`, func(s string) bool { return s == "live" })
	typeKeys(t, ctx, "stty -icanon -echo; echo raw-$((6*7)); head -c 200000 | md5sum; stty sane\r")
	// In canonical mode the terminal would cut a line at 4,095 bytes.
	transcript(t, ctx, "the terminal in raw mode", func(s string) bool { return strings.Contains(s, "raw-42") })
	var b strings.Builder
	for i := 0; b.Len() < 200000; i++ {
		fmt.Fprintf(&b, "%d,", i)
	}
	text := b.String()[:200000]
	began := time.Now()
	typeKeys(t, ctx, text)
	want := fmt.Sprintf("%x", md5.Sum([]byte(text)))
	transcript(t, ctx, "md5sum of the input", func(s string) bool { return strings.Contains(s, want) })
	t.Logf("200,000 characters typed at once reached the program in %v", time.Since(began).Round(time.Millisecond))
}

// TestBrowserShowsGap: with flow live (the program never waits), output
// a page reads too slowly to keep is lost and shows as a notice. With the
// default flow nothing is lost: TestBrowserResumesAfterServerDrops.
//
// The page falls behind on purpose: its main thread is busy in one
// synchronous script (so the WebSocket's bytes stay in the browser's and
// the kernel's buffers, and the gateway's writer waits) from before the
// program starts writing until it has written all of its 20 MB (half of it
// under -race, which the busy page's 20 s must also cover), far more than
// those buffers and the 64K ring hold. A gap then comes on the open
// connection. Cuts between the page and the gateway would not do: a page
// that resumes past evicted history gets a snapshot of the screen, not a
// gap, so whether a notice showed depended on the page falling behind
// between two cuts by chance.
func TestBrowserShowsGap(t *testing.T) {
	g := startGateway(t, "--ring-bytes", "64K", "--flow", "live")
	ctx := needBrowser(t)
	tok := g.token(t, "acme", allScopes)
	openPage(t, ctx, g.url+"/#token="+tok)
	poll(t, ctx, "live", `window.__termgate.status()`, func(s string) bool { return s == "live" })
	lines := 3000000
	if sandboxtest.Race {
		// Under -race, on a machine busy with the other tests, 1.5
		// million lines once took longer than the page's busy spell
		// (20 s), and then 700,000 did: 150,000 lines (about 1 MB) still
		// pass the 64 KiB ring 15 times.
		lines = 150000
	}
	keys := fmt.Sprintf("read x; seq 1 %d > /dev/tty; echo gap-done-$((1+1))\r", lines)
	typeKeys(t, ctx, keys)
	var id string
	sandboxtest.Eventually(t, 20*time.Second, func() bool {
		if list := g.executionsOf(t, "acme"); len(list) == 1 {
			id = list[0].ID
		}
		return id != ""
	})
	// The page paces its input: the script starts once all of it arrived.
	if !sandboxtest.Eventually(t, 20*time.Second, func() bool { return g.inputOffset(t, tok, id) >= uint64(len(keys)) }) {
		t.Fatalf("execution %q did not receive the typed line", id)
	}
	bctx, cancel := context.WithTimeout(ctx, 40*time.Second)
	defer cancel()
	finished, err := chromedp.Run(bctx, chromedp.Evaluate[bool](fmt.Sprintf(busyUntilWritten, tok, id)))
	if err != nil || !finished {
		t.Fatalf("the program did not finish writing while the page was busy: %v, %v", finished, err)
	}
	poll(t, ctx, "a gap notice", `document.querySelectorAll("#notices .gap-notice").length`, func(n int) bool { return n > 0 })
}

// busyUntilWritten is a script that keeps the page's main thread busy with
// synchronous requests to the HTTP API (token, then id): it answers the
// shell's read, then follows the execution's events until its marker
// shows (true), at most 20 s (false): within the gateway's write timeout.
const busyUntilWritten = `(() => {
  const api = (method, path, body) => {
    const x = new XMLHttpRequest();
    x.open(method, '/v1/executions/' + %[2]q + path, false);
    x.setRequestHeader('Authorization', 'Bearer ' + %[1]q);
    x.setRequestHeader('Content-Type', 'application/json');
    x.send(body ? JSON.stringify(body) : null);
    return JSON.parse(x.responseText);
  };
  const offset = api('POST', '/input', { offset: 0 }).input_offset;
  api('POST', '/input', { offset, data: btoa('\r') });
  let after = 0, incarnation = '';
  for (const end = Date.now() + 20000; Date.now() < end;) {
    const r = api('GET', '/events?wait=1s&after=' + after + '&incarnation=' + incarnation);
    if (r.events.some((e) => e.data && atob(e.data).includes('gap-done-2'))) return true;
    after = r.next_after;
    incarnation = r.incarnation;
  }
  return false;
})()`

func TestBrowserReadOnlyViewerCannotType(t *testing.T) {
	g := startGateway(t)
	ctx := needBrowser(t)
	owner := g.owner(t)
	e, err := owner.Start(t.Context(), wire.Request{ID: "watched", Command: "/bin/sh",
		Args: []string{"-c", "read x; echo typed=$x"}, PTY: &wire.Size{Rows: 24, Cols: 80}})
	if err != nil {
		t.Fatal(err)
	}
	openPage(t, ctx, g.url+"/#token="+g.token(t, "acme", "exec:attach")+"&id=watched")
	poll(t, ctx, "read-only", `window.__termgate.status()`, func(s string) bool { return s == "read-only" })
	typeKeys(t, ctx, "intruder\r")
	time.Sleep(500 * time.Millisecond)
	e.Write([]byte("owner\r"))
	out := transcript(t, ctx, "the owner's input", func(s string) bool { return strings.Contains(s, "typed=") })
	if !strings.Contains(out, "typed=owner") || strings.Contains(out, "intruder") {
		t.Fatalf("viewer transcript %q", out)
	}
}

// TestBrowserWriterFitsTheTerminal: a page that may type makes the
// terminal it attaches to the size of its window, as it does after a
// reload and when the window changes, so a program draws for the screen
// the viewer sees; a read-only page leaves the size to the writers.
func TestBrowserWriterFitsTheTerminal(t *testing.T) {
	g := startGateway(t)
	ctx := needBrowser(t)
	e, err := g.owner(t).Start(t.Context(), wire.Request{ID: "fit", Command: "/bin/sh", PTY: &wire.Size{Rows: 24, Cols: 80}})
	if err != nil {
		t.Fatal(err)
	}
	f := follow(t.Context(), e)
	// sized asks the shell for its terminal's size until it answers want,
	// and returns what it last answered.
	sized := func(want string) (string, bool) {
		var last string
		ok := sandboxtest.Eventually(t, 30*time.Second, func() bool {
			from := len(f.output())
			e.Write([]byte("echo size=$(stty size)\r"))
			time.Sleep(100 * time.Millisecond)
			last = f.output()[from:]
			return strings.Contains(last, "size="+want+"\r")
		})
		return last, ok
	}
	openPage(t, ctx, g.url+"/#token="+g.token(t, "acme", "exec:attach")+"&id=fit")
	poll(t, ctx, "read-only", `window.__termgate.status()`, func(s string) bool { return s == "read-only" })
	if last, ok := sized("24 80"); !ok {
		t.Fatalf("with a read-only page attached the terminal is not 24x80: %q", last)
	}
	// The writer opens in a browser of its own, while the viewer stays.
	writer := needBrowser(t)
	openPage(t, writer, g.url+"/#token="+g.token(t, "acme", allScopes)+"&id=fit")
	poll(t, writer, "live", `window.__termgate.status()`, func(s string) bool { return s == "live" })
	page := poll(t, writer, "the page's size", `window.__termgate.screen()`, func(s browserScreen) bool { return s.Size[0] > 0 })
	if page.Size == [2]int{24, 80} {
		t.Fatalf("the page's window fits 24x80: the test cannot tell a fitted terminal")
	}
	want := fmt.Sprintf("%d %d", page.Size[0], page.Size[1])
	if last, ok := sized(want); !ok {
		t.Fatalf("a writing page of %s attached, and the terminal is not its size: %q", want, last)
	}
}

// TestBrowserOtherOriginCannotConnect: a page from another origin that
// holds a valid token still cannot open the WebSocket.
func TestBrowserOtherOriginCannotConnect(t *testing.T) {
	g := startGateway(t)
	ctx := needBrowser(t)
	tok := g.token(t, "acme", allScopes)
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<!doctype html><title>waiting</title><script>
const ws = new WebSocket(%q, ["termgate.v1", "termgate.bearer." + %q]);
ws.onopen = () => { document.title = "connected"; };
ws.onerror = () => { document.title = "refused"; };
</script>`, "ws"+strings.TrimPrefix(g.url, "http")+"/v1/connect", tok)
	}))
	defer evil.Close()
	openPage(t, ctx, evil.URL) // 127.0.0.1 on another port: another origin
	title := poll(t, ctx, "the cross-origin verdict", `document.title`, func(s string) bool { return s != "waiting" })
	if title != "refused" {
		t.Fatalf("a page from another origin connected: %s", title)
	}
}

// inputOffset is how many input bytes execution id received, over the
// HTTP API; 0 while it cannot say (not running yet: 409).
func (g gatewayUnderTest) inputOffset(t *testing.T, tok, id string) uint64 {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "POST", g.url+"/v1/executions/"+id+"/input", strings.NewReader(`{"offset":0}`))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("input offset: %v", err)
	}
	defer r.Body.Close()
	var body struct {
		InputOffset uint64 `json:"input_offset"`
	}
	if r.StatusCode == http.StatusConflict {
		return 0
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || r.StatusCode != 200 {
		t.Fatalf("input offset: %d %v", r.StatusCode, err)
	}
	return body.InputOffset
}

// owner connects a Go client to g with all scopes of tenant acme, closed
// when the test ends.
func (g gatewayUnderTest) owner(t *testing.T) *client.Client {
	t.Helper()
	c, err := client.Dial(t.Context(), client.Config{URL: g.url, Token: func(context.Context) (string, error) {
		return g.token(t, "acme", allScopes), nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// executionsOf lists tenant's executions over the HTTP API, as the page does.
func (g gatewayUnderTest) executionsOf(t *testing.T, tenant string) []struct{ ID, Status string } {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "GET", g.url+"/v1/executions", nil)
	req.Header.Set("Authorization", "Bearer "+g.token(t, tenant, allScopes))
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	defer r.Body.Close()
	var body struct{ Executions []struct{ ID, Status string } }
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || r.StatusCode != 200 {
		t.Fatalf("list: %d %v", r.StatusCode, err)
	}
	return body.Executions
}

// signalsTo returns the signals execution id of tenant got, from its
// events over the HTTP API.
func (g gatewayUnderTest) signalsTo(t *testing.T, tenant, id string) []string {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "GET", g.url+"/v1/executions/"+id+"/events?after=0", nil)
	req.Header.Set("Authorization", "Bearer "+g.token(t, tenant, allScopes))
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("events: %v", err)
	}
	defer r.Body.Close()
	var body struct {
		Events []struct{ Kind, Signal string }
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || r.StatusCode != 200 {
		t.Fatalf("events: %d %v", r.StatusCode, err)
	}
	var signals []string
	for _, e := range body.Events {
		if e.Kind == "signal" {
			signals = append(signals, e.Signal)
		}
	}
	return signals
}

// click clicks the first element matching the CSS selector sel once it is visible.
func click(t *testing.T, ctx context.Context, sel string) {
	t.Helper()
	// The list redraws itself every few seconds: a node found may be gone
	// by the click, so a failed click is tried again on the new node.
	var err error
	if !sandboxtest.Eventually(t, 60*time.Second, func() bool {
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		_, err = chromedp.Run(cctx, chromedp.Click(chromedp.CSS(sel), chromedp.NodeVisible))
		return err == nil
	}) {
		t.Fatalf("click %s: %v", sel, err)
	}
}

// rowJS is a script whose value is the list's row of execution id as
// [status, title], or [] while the list does not show it.
func rowJS(id string) string {
	return fmt.Sprintf(`(() => {
  const list = document.getElementById('executions');
  const tr = list && !list.hidden && [...list.querySelectorAll('tr[data-id]')].find((r) => r.dataset.id === %q);
  return tr ? [tr.querySelector('.status').textContent, tr.querySelector('.title').textContent] : [];
})()`, id)
}

// TestBrowserListReattachesAClosedTab: closing a tab leaves its shell
// running, named by its title in the list, which reattaches it; the page
// opened afresh while it runs lists it instead of starting another shell.
func TestBrowserListReattachesAClosedTab(t *testing.T) {
	g := startGateway(t)
	ctx := needBrowser(t)
	link := g.url + "/#token=" + g.token(t, "acme", allScopes)
	openPage(t, ctx, link)
	poll(t, ctx, "live", `window.__termgate.status()`, func(s string) bool { return s == "live" })
	id := poll(t, ctx, "the execution", `window.__termgate.execution() ?? ""`, func(s string) bool { return s != "" })
	transcript(t, ctx, "the shell's prompt", func(s string) bool { return strings.Contains(s, "$ ") })
	typeKeys(t, ctx, `x=$((6*7)); printf '\033]0;kept-%s\007' $x`+"\r")
	poll(t, ctx, "the tab named by the title", `window.__termgate.tabs().map((t) => t.label).join()`,
		func(s string) bool { return s == "kept-42" })
	click(t, ctx, ".tab .close")
	row := poll(t, ctx, "the closed tab's shell in the list", rowJS(id), func(r []string) bool { return len(r) == 2 })
	if row[0] != "running" || row[1] != "kept-42" {
		t.Errorf("the list shows %q", row)
	}
	if n, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`window.__termgate.tabs().length`)); n != 0 {
		t.Errorf("closing the last tab left %d tabs", n)
	}
	if ex := g.executionsOf(t, "acme"); len(ex) != 1 || ex[0].ID != id || ex[0].Status != "running" {
		t.Fatalf("after the tab closed the gateway has %v", ex)
	}

	// The page opened again in another browser tab (nothing in its
	// session) lists the running shell and starts none.
	tab2, cancel := chromedp.NewContext(ctx)
	defer cancel()
	// The first Run opens the tab, which lives as long as that call's context.
	if _, err := chromedp.Run(tab2, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("open another tab: %v", err)
	}
	openPage(t, tab2, link)
	poll(t, tab2, "the running shell listed", rowJS(id), func(r []string) bool { return len(r) == 2 })
	if n, _ := chromedp.Run(tab2, chromedp.Evaluate[int](`window.__termgate.tabs().length`)); n != 0 {
		t.Errorf("the page opened afresh has %d tabs", n)
	}
	if ex := g.executionsOf(t, "acme"); len(ex) != 1 {
		t.Fatalf("the page opened afresh started a shell: %v", ex)
	}
	cancel()

	click(t, ctx, fmt.Sprintf(`#executions tr[data-id=%q] .attach`, id))
	poll(t, ctx, "reattached", `window.__termgate.execution() ?? ""`, func(s string) bool { return s == id })
	poll(t, ctx, "live", `window.__termgate.status()`, func(s string) bool { return s == "live" })
	typeKeys(t, ctx, "echo back-$x\r") // the same shell: x is still set
	transcript(t, ctx, "the shell's answer", func(s string) bool { return strings.Contains(s, "back-42") })
	// An interactive shell ignores SIGTERM, so check what it was sent: the
	// page's requests on its connection are handled in order, so a cancel
	// sent as the tab closed was handled before the input typed since.
	if sig := g.signalsTo(t, "acme", id); len(sig) != 0 {
		t.Errorf("closing the tab sent the shell %v", sig)
	}
}

// TestBrowserCancelsFromList: the list's Cancel stops another shell of
// the tenant.
func TestBrowserCancelsFromList(t *testing.T) {
	g := startGateway(t)
	ctx := needBrowser(t)
	owner := g.owner(t)
	e, err := owner.Start(t.Context(), wire.Request{ID: "victim", Command: "/bin/sh",
		Args: []string{"-c", "sleep 600"}, PTY: &wire.Size{Rows: 24, Cols: 80}})
	if err != nil {
		t.Fatal(err)
	}
	e.Detach(t.Context())
	openPage(t, ctx, g.url+"/#token="+g.token(t, "acme", allScopes))
	poll(t, ctx, "the shell listed", rowJS("victim"), func(r []string) bool { return len(r) == 2 && r[0] == "running" })
	click(t, ctx, `#executions tr[data-id="victim"] .cancel`)
	poll(t, ctx, "the shell cancelled", rowJS("victim"), func(r []string) bool { return len(r) == 2 && r[0] == "cancelled" })
	if ex := g.executionsOf(t, "acme"); len(ex) != 1 || ex[0].Status != "cancelled" {
		t.Fatalf("the gateway has %v", ex)
	}
}

// TestBrowserListWithoutWriteScope: a token without exec:write lists the
// tenant's shells without Cancel and watches one read-only.
func TestBrowserListWithoutWriteScope(t *testing.T) {
	g := startGateway(t)
	ctx := needBrowser(t)
	owner := g.owner(t)
	e, err := owner.Start(t.Context(), wire.Request{ID: "watched", Command: "/bin/sh",
		Args: []string{"-c", "echo watched-$((6*7)); sleep 600"}, PTY: &wire.Size{Rows: 24, Cols: 80}})
	if err != nil {
		t.Fatal(err)
	}
	e.Detach(t.Context())
	openPage(t, ctx, g.url+"/#token="+g.token(t, "acme", "exec:attach"))
	poll(t, ctx, "the shell listed", rowJS("watched"), func(r []string) bool { return len(r) == 2 && r[0] == "running" })
	buttons, _ := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('#executions tr[data-id="watched"] button')].map((b) => b.textContent)`))
	if fmt.Sprint(buttons) != "[Watch]" {
		t.Errorf("the row offers %q", buttons)
	}
	click(t, ctx, `#executions tr[data-id="watched"] .attach`)
	poll(t, ctx, "read-only", `window.__termgate.status()`, func(s string) bool { return s == "read-only" })
	transcript(t, ctx, "the shell's output", func(s string) bool { return strings.Contains(s, "watched-42") })
}

// TestBrowserTitleAndWideCharacters: the title a program sets names its
// tab as text; East Asian wide characters and emoji take two cells.
func TestBrowserTitleAndWideCharacters(t *testing.T) {
	g := startGateway(t)
	ctx := needBrowser(t)
	openPage(t, ctx, g.url+"/#token="+g.token(t, "acme", allScopes))
	awaitPrompt(t, ctx)
	typeKeys(t, ctx, `printf '\033]0;hello\007'`+"\r")
	poll(t, ctx, "the tab named hello", `window.__termgate.tabs().map((t) => t.label).join()`, func(s string) bool { return s == "hello" })
	typeKeys(t, ctx, `printf '\033]2;<img src=x onerror=alert(1)>&amp;\007'`+"\r")
	label := poll(t, ctx, "the tab renamed", `window.__termgate.tabs().map((t) => t.label).join()`, func(s string) bool { return s != "hello" })
	if label != "<img src=x onerror=alert(1)>&amp;" {
		t.Errorf("tab label %q", label)
	}
	if n, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#tabs img').length`)); n != 0 {
		t.Errorf("the title became markup: %d img elements", n)
	}
	// 漢 and 😀 typed as octal escapes: the line of output starts with W:.
	typeKeys(t, ctx, `printf 'W:\346\274\242\360\237\230\200|\n'`+"\r")
	cells := poll(t, ctx, "the wide characters", `window.__termgate.cells('W:')`, func(c [][]any) bool { return len(c) >= 7 })
	want := "[[W 1] [: 1] [漢 2] [ 0] [😀 2] [ 0] [| 1]]"
	if got := fmt.Sprint(cells[:7]); got != want {
		t.Errorf("cells %s, want %s", got, want)
	}
}

// TestBrowserSearchesScrollback: the search bar finds a line that
// scrolled far out of view.
func TestBrowserSearchesScrollback(t *testing.T) {
	g := startGateway(t)
	ctx := needBrowser(t)
	openPage(t, ctx, g.url+"/#token="+g.token(t, "acme", allScopes))
	awaitPrompt(t, ctx)
	typeKeys(t, ctx, "echo needle-$((6*7)); seq 1 2000; echo seq-$((6*7))\r")
	transcript(t, ctx, "all of seq", func(s string) bool { return strings.Contains(s, "\nseq-42") })
	click(t, ctx, "#search-toggle")
	if _, err := chromedp.Run(ctx, chromedp.Focus(chromedp.CSS("#search-input"))); err != nil {
		t.Fatal(err)
	}
	_, err := chromedp.Run(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, input.InsertText, input.InsertTextParams{Text: "needle-42"})
		return err
	}))
	if err != nil {
		t.Fatal(err)
	}
	pressEnter(t, ctx)
	poll(t, ctx, "the match selected", `window.__termgate.selection()`, func(s string) bool { return s == "needle-42" })
	poll(t, ctx, "the match in view", `document.querySelector('.term:not([hidden]) .xterm-rows').textContent.includes('needle-42')`,
		func(b bool) bool { return b })
	count, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('search-count').textContent`))
	if count != "1 of 1" {
		t.Errorf("search count %q", count)
	}
}

// TestBrowserBareURL: a page opened without a token says how to get one,
// and does not try the gateway.
func TestBrowserBareURL(t *testing.T) {
	g := startGateway(t)
	ctx := needBrowser(t)
	openPage(t, ctx, g.url+"/")
	poll(t, ctx, "no token", `window.__termgate.status()`, func(s string) bool { return s == "no-token" })
	text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('status').textContent + '\n' + document.getElementById('empty').innerText`))
	for _, want := range []string{"no token", "termgate token", "termgate serve --dev"} {
		if !strings.Contains(text, want) {
			t.Errorf("the page %q does not say %s", text, want)
		}
	}
	if strings.Contains(text, "refused") {
		t.Errorf("the page %q speaks of a refusal", text)
	}
	if n, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`window.__termgate.connections()`)); n != 0 {
		t.Errorf("the page opened %d connections without a token", n)
	}
}

// TestBrowserForeignTokenAsks: a link with another tenant's token shows
// both identities and replaces the stored token only when confirmed; one
// of the same tenant and subject replaces it at once. The page never
// shows a token.
func TestBrowserForeignTokenAsks(t *testing.T) {
	g := startGateway(t)
	ctx := needBrowser(t)
	mine, evil := g.token(t, "acme", allScopes), g.token(t, "evil", allScopes)
	openPage(t, ctx, g.url+"/#token="+mine)
	poll(t, ctx, "live", `window.__termgate.status()`, func(s string) bool { return s == "live" })
	stored := `localStorage.getItem('termgate.token')`
	dialog := `(() => { const d = document.getElementById('token-confirm'); return d.hidden ? '' : d.textContent; })()`
	check := func(when, want string) {
		t.Helper()
		if got, _ := chromedp.Run(ctx, chromedp.Evaluate[string](stored)); got != want {
			t.Errorf("%s the stored token changed (%d bytes, want %d)", when, len(got), len(want))
		}
		body, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.documentElement.outerHTML + location.href`))
		if strings.Contains(body, strings.Split(mine, ".")[2]) || strings.Contains(body, strings.Split(evil, ".")[2]) {
			t.Errorf("%s the page shows a token", when)
		}
	}
	for _, how := range []string{"in the page", "loaded afresh"} {
		if how == "in the page" {
			chromedp.Run(ctx, chromedp.Evaluate[any](`location.hash = '#token=' + `+strconv.Quote(evil)))
		} else {
			openPage(t, ctx, "about:blank")
			openPage(t, ctx, g.url+"/#token="+evil)
		}
		text := poll(t, ctx, "the question "+how, dialog, func(s string) bool { return s != "" })
		for _, want := range []string{"tenant acme, subject acme", "tenant evil, subject evil"} {
			if !strings.Contains(text, want) {
				t.Errorf("%s: the question %q does not show %s", how, text, want)
			}
		}
		check("while asking "+how, mine)
		click(t, ctx, "#token-keep")
		poll(t, ctx, "the question gone", dialog, func(s string) bool { return s == "" })
		check("kept "+how, mine)
		poll(t, ctx, "live with the stored token", `window.__termgate.status()`, func(s string) bool { return s == "live" })
	}
	// The same tenant and subject: a newer token replaces the stored one.
	newer := g.token(t, "acme", "exec:attach exec:write exec:create")
	openPage(t, ctx, "about:blank")
	openPage(t, ctx, g.url+"/#token="+newer)
	poll(t, ctx, "live", `window.__termgate.status()`, func(s string) bool { return s == "live" })
	if d, _ := chromedp.Run(ctx, chromedp.Evaluate[string](dialog)); d != "" {
		t.Errorf("a token of the same identity asked: %q", d)
	}
	mine = newer
	check("after a token of the same identity", newer)

	openPage(t, ctx, "about:blank")
	openPage(t, ctx, g.url+"/#token="+evil)
	poll(t, ctx, "the question", dialog, func(s string) bool { return s != "" })
	click(t, ctx, "#token-accept")
	poll(t, ctx, "the identity switched", `document.getElementById('identity').textContent`,
		func(s string) bool { return s == "tenant evil, subject evil" })
	check("confirmed", evil)
}

// browserScreen is what the page's active terminal shows.
type browserScreen struct {
	Lines  []string `json:"lines"`
	Cursor [2]int   `json:"cursor"`
	Buffer string   `json:"buffer"`
	Size   [2]int   `json:"size"` // rows, columns
}

// TestBrowserReloadRestoresTheTUI: a page watches a TUI draw 20 lines and
// then make 60,000 small updates, more than the ring keeps; after a
// reload the page shows exactly the same screen, cursor and buffer.
func TestBrowserReloadRestoresTheTUI(t *testing.T) {
	g := startGateway(t)
	ctx := needBrowser(t)
	owner := g.owner(t)
	script := `read go; printf '\033[?1049h\033[2J\033[H\033]0;the tui\007'
i=1; while [ $i -le 20 ]; do printf 'line %d \033[1;3%dmcolour\033[0m\r\n' $i $((i % 8)); i=$((i+1)); done
i=0; while [ $i -lt 60000 ]; do printf '\033[22;1H\033[7mcounter %d\033[0m' $i; i=$((i+1)); done
printf '\033[12;30H'; exec sleep 600`
	e, err := owner.Start(t.Context(), wire.Request{ID: "tui", Command: "/bin/sh", Args: []string{"-c", script}, PTY: &wire.Size{Rows: 24, Cols: 80}})
	if err != nil {
		t.Fatal(err)
	}
	openPage(t, ctx, g.url+"/#token="+g.token(t, "acme", allScopes)+"&id=tui")
	poll(t, ctx, "live", `window.__termgate.status()`, func(s string) bool { return s == "live" })
	e.Write([]byte("go\r"))
	e.Detach(t.Context())
	done := func(s browserScreen) bool {
		return s.Buffer == "alternate" && len(s.Lines) > 21 && strings.HasPrefix(s.Lines[21], "counter 59999") && s.Cursor == [2]int{29, 11}
	}
	before := poll(t, ctx, "the TUI drawn", `window.__termgate.screen()`, done)
	if first := g.firstSeq(t, "tui"); first <= 1 {
		t.Fatalf("the ring holds everything from %d: the reload would replay it all", first)
	}
	if _, err := chromedp.Run(ctx, chromedp.Reload()); err != nil {
		t.Fatal(err)
	}
	after := poll(t, ctx, "the TUI after the reload", `window.__termgate.screen()`, done)
	if !slices.Equal(before.Lines, after.Lines) || before.Cursor != after.Cursor {
		t.Fatalf("after the reload the screen is\n%q, cursor %v\nbefore it was\n%q, cursor %v", after.Lines, after.Cursor, before.Lines, before.Cursor)
	}
	if before.Lines[0] != "line 1 colour" || before.Lines[19] != "line 20 colour" {
		t.Fatalf("the TUI drew %q", before.Lines)
	}
}

// firstSeq is the oldest sequence execution id's ring retains.
func (g gatewayUnderTest) firstSeq(t *testing.T, id string) uint64 {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "GET", g.url+"/v1/executions/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+g.token(t, "acme", "exec:attach"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var info struct {
		FirstSeq uint64 `json:"first_seq"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil {
		t.Fatal(err)
	}
	return info.FirstSeq
}

// TestBrowserReloadRestoresVimAndLess: vim after thousands of lines typed
// and less after thousands of pages, their drawing evicted from the ring:
// a reload shows the page exactly the screen it showed before.
func TestBrowserReloadRestoresVimAndLess(t *testing.T) {
	for _, tc := range []struct {
		name, script string
		keys         func(e *client.Execution)
		done         func(s browserScreen) bool
	}{
		{"vim", "exec vim -u NONE -N -i NONE -n /tmp/notes", func(e *client.Execution) {
			e.Write([]byte("i"))
			for i := range 2000 { // paced, so that vim redraws as it goes
				e.Write(fmt.Appendf(nil, "line %d of the notes, typed one after another\r", i))
				time.Sleep(time.Millisecond)
			}
			e.Write([]byte("\x1bgg"))
		}, func(s browserScreen) bool {
			return s.Buffer == "alternate" && len(s.Lines) > 0 && s.Lines[0] == "line 0 of the notes, typed one after another" && s.Cursor == [2]int{0, 0}
		}},
		{"less", "seq 1 500000 | exec less", func(e *client.Execution) {
			for range 3000 { // pages of 23 to 33 lines stay short of line 99999
				e.Write([]byte(" "))
			}
			e.Write([]byte("/99999\r"))
		}, func(s browserScreen) bool {
			return s.Buffer == "alternate" && slices.Contains(s.Lines, "99999") && strings.HasPrefix(s.Lines[len(s.Lines)-1], ":")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A small ring, so that the drawing is evicted: the programs
			// skip redraws for keys typed ahead, and print little.
			g := startGateway(t, "--input-per-second", "100000", "--ring-bytes", "16K", "--ring-events", "64")
			ctx := needBrowser(t)
			e, err := g.owner(t).Start(t.Context(), wire.Request{ID: tc.name, Command: "/bin/sh", Args: []string{"-c", tc.script}, PTY: &wire.Size{Rows: 24, Cols: 80}})
			if err != nil {
				t.Fatal(err)
			}
			go func() { // the owner reads (and so acknowledges) what it is sent
				for {
					if _, err := e.Next(t.Context()); err != nil {
						return
					}
				}
			}()
			openPage(t, ctx, g.url+"/#token="+g.token(t, "acme", allScopes)+"&id="+tc.name)
			poll(t, ctx, "live", `window.__termgate.status()`, func(s string) bool { return s == "live" })
			tc.keys(e)
			before := poll(t, ctx, tc.name+" drawn", `window.__termgate.screen()`, tc.done)
			time.Sleep(time.Second) // anything still on its way has arrived
			before = poll(t, ctx, tc.name+" drawn", `window.__termgate.screen()`, tc.done)
			if first := g.firstSeq(t, tc.name); first <= 1 {
				t.Fatalf("the ring holds everything from %d: the reload would replay it all", first)
			}
			if _, err := chromedp.Run(ctx, chromedp.Reload()); err != nil {
				t.Fatal(err)
			}
			after := poll(t, ctx, tc.name+" after the reload", `window.__termgate.screen()`, tc.done)
			if !slices.Equal(before.Lines, after.Lines) || before.Cursor != after.Cursor {
				t.Fatalf("after the reload the screen is\n%q, cursor %v\nbefore it was\n%q, cursor %v", after.Lines, after.Cursor, before.Lines, before.Cursor)
			}
		})
	}
}

// TestBrowserIdleShellWarnedThenStopped: an interactive shell outlives the
// batch timeout; with no writer attached it is warned, in a read-only
// viewer's page, and then stopped at the idle timeout.
func TestBrowserIdleShellWarnedThenStopped(t *testing.T) {
	g := startGateway(t, "--timeout", "2s", "--interactive-idle-timeout", "8s", "--timeout-warning", "4s")
	ctx := needBrowser(t)
	began := time.Now()
	e, err := g.owner(t).Start(t.Context(), wire.Request{ID: "idle", Command: "/bin/sh", PTY: &wire.Size{Rows: 24, Cols: 80}})
	if err != nil {
		t.Fatal(err)
	}
	e.Detach(t.Context()) // no writer attached: the idle clock runs
	openPage(t, ctx, g.url+"/#token="+g.token(t, "acme", "exec:attach")+"&id=idle")
	poll(t, ctx, "the warning", `document.querySelector("#notices").textContent`, func(s string) bool {
		return strings.Contains(s, "will be stopped")
	})
	warned := time.Since(began)
	if warned < 2*time.Second {
		t.Fatalf("warned after %v: the shell may have died at the batch timeout", warned)
	}
	tabs := poll(t, ctx, "the shell stopped", `window.__termgate.tabs()`, func(tabs []map[string]any) bool {
		return len(tabs) == 1 && tabs[0]["exited"] == true
	})
	if stopped := time.Since(began); stopped < 7*time.Second {
		t.Fatalf("the shell stopped after %v, before its idle timeout of 8s (tabs %v)", stopped, tabs)
	}
	poll(t, ctx, "the exit shown", `window.__termgate.screen()`, func(s browserScreen) bool {
		return slices.ContainsFunc(s.Lines, func(l string) bool { return strings.Contains(l, "timed out:idle") })
	})
}

// TestBrowserPortsPanel: a server the shell starts appears in the page's
// ports bar by itself; its button makes a preview that opens the
// server's page.
func TestBrowserPortsPanel(t *testing.T) {
	g := startGateway(t)
	ctx := needBrowser(t)
	openPage(t, ctx, g.url+"/#token="+g.token(t, "acme", allScopes+" exec:forward"))
	awaitPrompt(t, ctx)
	if hidden, _ := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById('ports').hidden`)); !hidden {
		t.Error("the ports bar shows before anything listens")
	}
	typeKeys(t, ctx, "python3 -m http.server --bind 127.0.0.1 8123\r")
	button := `#ports .port[data-port="8123"]`
	poll(t, ctx, "port 8123 in the bar", fmt.Sprintf(`document.querySelector(%q) !== null`, button), func(b bool) bool { return b })
	click(t, ctx, button)
	u := poll(t, ctx, "the preview's URL", fmt.Sprintf(`document.querySelector(%q).dataset.url || ""`, button), func(s string) bool { return s != "" })
	jar, _ := cookiejar.New(nil)
	resp, err := (&http.Client{Jar: jar}).Get(u)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "Directory listing") {
		t.Errorf("the preview the page made: %d %q", resp.StatusCode, body)
	}
}
