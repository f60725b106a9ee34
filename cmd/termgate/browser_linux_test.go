package main

import (
	"bytes"
	"context"
	"crypto/md5"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1000, 640),
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
}

// TestBrowserResumesAfterServerDrops: the proxy cuts the page's
// WebSocket from the server side every 16 to 144 KiB while seq streams
// and more lines are typed; every line of seq must arrive exactly once,
// and every line typed must run exactly once.
func TestBrowserResumesAfterServerDrops(t *testing.T) {
	g := startGateway(t, "--ring-bytes", "32M")
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
				t.Fatalf("line %d arrived where %d was due", n, next)
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
	poll(t, ctx, "live", `window.__termgate.status()`, func(s string) bool { return s == "live" })
	transcript(t, ctx, "the shell's prompt", func(s string) bool { return strings.Contains(s, "$ ") })
	typeKeys(t, ctx, "x=$((6*7))\r")
	proxy.Refuse(true)
	countdown := regexp.MustCompile(`^reconnecting in \d+ s$`)
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

func TestBrowserShowsGap(t *testing.T) {
	g := startGateway(t, "--ring-bytes", "64K")
	proxy := newDroppingProxy(t, strings.TrimPrefix(g.url, "http://"))
	ctx := needBrowser(t)
	openPage(t, ctx, "http://"+proxy.Addr()+"/#token="+g.token(t, "acme", allScopes))
	poll(t, ctx, "live", `window.__termgate.status()`, func(s string) bool { return s == "live" })
	typeKeys(t, ctx, "seq 1 3000000 > /dev/tty; echo gap-done\r")
	poll(t, ctx, "a gap notice", `document.querySelectorAll("#notices .gap-notice").length`, func(n int) bool { return n > 0 })
}

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
