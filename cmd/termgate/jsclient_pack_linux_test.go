package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// TestJSClientPackage: web/client as users get it: npm pack makes the
// tarball (its types made from the sources then), which installs into an
// empty project with no registry; tsc type-checks a consumer of both
// exports against the packed types; under Node, README.md's example runs
// against a real serve (agent exec, a streamed command and its exit), and
// so does the VS Code adapter: a terminal whose window reloads attaches
// again by ID and shows its screen.
func TestJSClientPackage(t *testing.T) {
	t.Parallel()
	npm, err := exec.LookPath("npm")
	sandboxtest.Need(t, "npm", err)
	web, _ := filepath.Abs(filepath.Join("..", "..", "web"))
	tsc := filepath.Join(web, "node_modules", ".bin", "tsc")
	_, err = os.Stat(tsc)
	sandboxtest.Need(t, "web's node_modules (cd web && npm ci)", err)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	run := func(in string, env []string, name string, args ...string) string {
		t.Helper()
		return runIn(ctx, t, in, env, name, args...)
	}
	path := "PATH=" + filepath.Dir(tsc) + ":" + os.Getenv("PATH")
	run(filepath.Join(web, "client"), []string{path}, npm, "pack", "--pack-destination", dir, "--silent")
	tarballs, _ := filepath.Glob(filepath.Join(dir, "termgate-client-*.tgz"))
	if len(tarballs) != 1 {
		t.Fatalf("npm pack made %q", tarballs)
	}
	listing := run(dir, nil, "tar", "tzf", tarballs[0])
	for _, want := range []string{"package/src/index.js", "package/src/vscode.js", "package/types/index.d.ts", "package/types/vscode.d.ts", "package/README.md"} {
		if !strings.Contains(listing, want+"\n") {
			t.Errorf("the tarball lacks %s:\n%s", want, listing)
		}
	}
	if strings.Contains(listing, ".test.js") {
		t.Errorf("the tarball holds tests:\n%s", listing)
	}

	proj := filepath.Join(dir, "proj")
	os.Mkdir(proj, 0o755)
	os.WriteFile(filepath.Join(proj, "package.json"), []byte(`{"name": "consumer", "private": true, "type": "module"}`), 0o644)
	run(proj, nil, npm, "install", "--offline", "--no-audit", "--no-fund", "--silent", tarballs[0])
	os.WriteFile(filepath.Join(proj, "check.ts"), []byte(`import { TermgateClient, TermgateHTTP, TermgateError, CODES, type ExecResult } from '@termgate/client';
import { createPseudoterminal } from '@termgate/client/vscode';
const api = new TermgateHTTP({ url: 'http://127.0.0.1:8080', getToken: () => 'token' });
const r: Promise<ExecResult> = api.exec({ command: 'true', yield_ms: 1000 });
const code: string = CODES[0];
const client = new TermgateClient({ url: 'ws://127.0.0.1:8080/v1/connect', getToken: () => 'token' });
const ex = client.start({ command: '/bin/sh', pty: { rows: 24, cols: 80 }, workspace_read_only: true });
ex.write('ls\r');
const pty = createPseudoterminal({ client, makeEmitter: () => ({ event: () => ({ dispose() {} }), fire() {}, dispose() {} }) });
pty.open({ columns: 80, rows: 24 });
export { r, code, pty, TermgateError };
`), 0o644)
	os.WriteFile(filepath.Join(proj, "tsconfig.json"), []byte(`{"compilerOptions": {"strict": true, "noEmit": true, "module": "nodenext", "moduleResolution": "nodenext", "target": "es2022", "lib": ["es2022", "dom"], "types": []}, "files": ["check.ts"]}`), 0o644)
	run(proj, nil, tsc, "-p", ".")

	g := startGateway(t)
	tok := g.token(t, "acme", allScopes)
	env := []string{"TERMGATE_URL=" + g.url, "TERMGATE_TOKEN=" + tok}
	readme, _ := os.ReadFile(filepath.Join(web, "client", "README.md"))
	m := regexp.MustCompile("(?s)```js\n(.*?)```").FindSubmatch(readme)
	if m == nil {
		t.Fatal("README.md has no js example")
	}
	os.WriteFile(filepath.Join(proj, "example.mjs"), m[1], 0o644)
	out := run(proj, env, "node", "--experimental-websocket", "--no-warnings", "example.mjs")
	if out != "Linux 42 exit 0\nstreamed\nexit 3\n" {
		t.Errorf("README.md's example printed %q", out)
	}

	script, _ := filepath.Abs(filepath.Join("testdata", "pty-reload.mjs"))
	b, _ := os.ReadFile(script)
	os.WriteFile(filepath.Join(proj, "pty-reload.mjs"), b, 0o644)
	out = run(proj, nil, "node", "--experimental-websocket", "--no-warnings", "pty-reload.mjs", g.url, tok)
	var seen struct {
		Screen string
		Code   int
		Names  []string
	}
	if err := json.Unmarshal([]byte(out), &seen); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if seen.Screen != "snapshot" && seen.Screen != "replay" || seen.Code != 7 || len(seen.Names) == 0 || seen.Names[len(seen.Names)-1] != "titled" {
		t.Errorf("the VS Code terminal after a reload: %+v", seen)
	}
}

// TestJSClientResumes: @termgate/client's TermgateClient under Node
// against a real serve, through a proxy that cuts every connection: the
// output of seq 1 200000, cut twice mid-stream, arrives whole with no gap
// and nothing twice; input written before and after a cut arrives once
// each; a cancel ends the execution; a refused token is told.
func TestJSClientResumes(t *testing.T) {
	t.Parallel()
	_, err := exec.LookPath("node")
	sandboxtest.Need(t, "node", err)
	g := startGateway(t)
	tok := g.token(t, "acme", allScopes)
	index, _ := filepath.Abs(filepath.Join("..", "..", "web", "client", "src", "index.js"))
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "--experimental-websocket", "--no-warnings", filepath.Join("testdata", "js-resume.mjs"), index, g.url, tok)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v: %s %s", err, out, stderr.String())
	}
	var seen struct {
		Reconnects int
		Output     struct {
			Exact       bool
			Bytes, Want int
			Gaps, Code  int
		}
		Input, Cancelled, Refused string
	}
	if err := json.Unmarshal(out, &seen); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !seen.Output.Exact || seen.Output.Gaps != 0 || seen.Output.Code != 5 || seen.Reconnects < 2 {
		t.Errorf("output across cuts: %+v, %d reconnects", seen.Output, seen.Reconnects)
	}
	if seen.Input != "one\ntwo\n" || seen.Cancelled != "cancelled" || seen.Refused != "unauthorized" {
		t.Errorf("input %q, cancel %q, refused token %q", seen.Input, seen.Cancelled, seen.Refused)
	}
}
