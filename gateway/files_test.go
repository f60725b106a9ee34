package gateway

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/termgate/termgate/gateway/auth"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/sandbox/sandboxtest"
	"github.com/termgate/termgate/session"
	"github.com/termgate/termgate/session/execid"
)

// fileCall makes a files API request and returns its status, body and
// header.
func (e *testEnv) fileCall(t *testing.T, method, path, tok string, body io.Reader, header http.Header) (int, []byte, http.Header) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), method, e.http.URL+"/v1/files/"+path, body)
	req.Header.Set("Authorization", "Bearer "+tok)
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := e.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header
}

// runIn runs a shell script in a sandbox of the tenant's (with pipes)
// and returns its output.
func (e *testEnv) runIn(t *testing.T, tenant, script string) string {
	t.Helper()
	c := e.dial(t, e.token(t, tenant, auth.ScopeCreate))
	defer c.close()
	id := execid.New()
	c.send(t, wire.Request{Type: wire.TypeStart, ID: id, Command: "/bin/sh", Args: []string{"-c", script}})
	c.expect(t, wire.MsgStarted)
	var info session.Info
	if !sandboxtest.Eventually(t, time.Minute, func() bool {
		info, _ = e.sup.Get(tenant, id)
		return info.Result != nil
	}) {
		t.Fatalf("%q did not end", script)
	}
	return string(info.Result.Stdout.Head) + string(info.Result.Stderr.Head)
}

func readHostFile(name string) (string, error) {
	b, err := os.ReadFile(name)
	return string(b), err
}

// TestFilesRoundTrip: a file PUT is the file GET gives, whole or in
// ranges, with its tag; a sandbox of the tenant sees it at /workspace
// and what it writes the API reads; a listing names entries of any bytes;
// mkdir, move and delete do what they say.
func TestFilesRoundTrip(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	tok := e.token(t, "acme", ScopeFilesRead, ScopeFilesWrite)
	body := bytes.Repeat([]byte("0123456789"), 100_000)
	code, b, h := e.fileCall(t, http.MethodPut, "src/data.bin?mode=0640", tok, bytes.NewReader(body), nil)
	var put apiFile
	json.Unmarshal(b, &put)
	if code != http.StatusCreated || put.Size != int64(len(body)) || put.Mode != "0640" || h.Get("ETag") == "" {
		t.Fatalf("PUT: %d %s", code, b)
	}
	code, got, h := e.fileCall(t, http.MethodGet, "src/data.bin", tok, nil, nil)
	if code != http.StatusOK || !bytes.Equal(got, body) || h.Get("ETag") != put.ETag || h.Get("Content-Type") != "application/octet-stream" {
		t.Errorf("GET: %d, %d bytes, tag %q (PUT's %q), type %q", code, len(got), h.Get("ETag"), put.ETag, h.Get("Content-Type"))
	}
	code, got, _ = e.fileCall(t, http.MethodGet, "src/data.bin", tok, nil, http.Header{"Range": {"bytes=10-19"}})
	if code != http.StatusPartialContent || string(got) != "0123456789" {
		t.Errorf("a range: %d %q", code, got)
	}
	if code, _, _ = e.fileCall(t, http.MethodGet, "src/data.bin", tok, nil, http.Header{"If-None-Match": {put.ETag}}); code != http.StatusNotModified {
		t.Errorf("If-None-Match of its tag: %d", code)
	}
	out := e.runIn(t, "acme", `cd /workspace && md5sum < src/data.bin && stat -c %a src/data.bin && printf made > "src/a
b" && printf x > src/$(printf 'bad\377')`)
	if want := "0640"; !strings.Contains(out, "640") {
		t.Errorf("the sandbox saw %q, want mode %s", out, want)
	}
	code, b, _ = e.fileCall(t, http.MethodGet, "src/", tok, nil, nil)
	var list apiFileList
	json.Unmarshal(b, &list)
	var names []string
	for _, f := range list.Entries {
		n := f.Name
		if f.Raw != "" {
			raw, _ := base64.StdEncoding.DecodeString(f.Raw)
			n = string(raw)
		}
		names = append(names, n)
	}
	if code != http.StatusOK || strings.Join(names, "|") != "a\nb|bad\xff|data.bin" {
		t.Errorf("the listing: %d %q", code, names)
	}
	var paged []string
	for after, i := "", 0; i < 10; i++ {
		code, b, _ = e.fileCall(t, http.MethodGet, "src/?limit=1&after="+after, tok, nil, nil)
		var page apiFileList
		if err := json.Unmarshal(b, &page); code != http.StatusOK || err != nil {
			t.Fatalf("a page: %d %s", code, b)
		}
		for _, f := range page.Entries {
			paged = append(paged, f.Name)
		}
		if after = page.Next; after == "" {
			break
		}
	}
	if len(paged) != 3 || paged[1] != "bad\uFFFD" {
		t.Errorf("the listing a name a page: %q", paged)
	}
	if code, got, _ = e.fileCall(t, http.MethodGet, "src/"+url.PathEscape("a\nb"), tok, nil, nil); code != 200 || string(got) != "made" {
		t.Errorf("a file the sandbox wrote, its name with a newline: %d %q", code, got)
	}
	if code, got, _ = e.fileCall(t, http.MethodGet, "src/bad%FF", tok, nil, nil); code != 200 || string(got) != "x" {
		t.Errorf("a name that is not UTF-8: %d %q", code, got)
	}
	if code, b, _ = e.fileCall(t, http.MethodPost, "out/deep?op=mkdir", tok, nil, nil); code != http.StatusCreated {
		t.Errorf("mkdir: %d %s", code, b)
	}
	if code, b, _ = e.fileCall(t, http.MethodPost, "src/data.bin?op=move&to=out/deep/moved.bin", tok, nil, nil); code != http.StatusOK {
		t.Errorf("move: %d %s", code, b)
	}
	if code, _, _ = e.fileCall(t, http.MethodGet, "src/data.bin", tok, nil, nil); code != http.StatusNotFound {
		t.Errorf("GET of what moved away: %d", code)
	}
	if code, b, _ = e.fileCall(t, http.MethodDelete, "out", tok, nil, nil); code != http.StatusConflict {
		t.Errorf("DELETE of a full directory: %d %s", code, b)
	}
	if code, _, _ = e.fileCall(t, http.MethodDelete, "out?recursive=1", tok, nil, nil); code != http.StatusNoContent {
		t.Errorf("DELETE recursive: %d", code)
	}
	if out := e.runIn(t, "acme", "ls /workspace/out 2>&1; echo done"); !strings.Contains(out, "No such file") {
		t.Errorf("after the delete the sandbox lists %q", out)
	}
}

// TestFilesConditionsAndRefusals: If-Match and If-None-Match guard a
// write; bad modes, paths and ops are refused with what is wrong.
func TestFilesConditionsAndRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	tok := e.token(t, "acme", ScopeFilesRead, ScopeFilesWrite)
	create := http.Header{"If-None-Match": {"*"}}
	if code, b, _ := e.fileCall(t, http.MethodPut, "f", tok, strings.NewReader("1"), create); code != http.StatusCreated {
		t.Fatalf("a create: %d %s", code, b)
	}
	if code, _, _ := e.fileCall(t, http.MethodPut, "f", tok, strings.NewReader("2"), create); code != http.StatusPreconditionFailed {
		t.Errorf("a create over a file: %d", code)
	}
	_, _, h := e.fileCall(t, http.MethodGet, "f", tok, nil, nil)
	if code, _, _ := e.fileCall(t, http.MethodPut, "f", tok, strings.NewReader("3"), http.Header{"If-Match": {h.Get("ETag")}}); code != http.StatusOK {
		t.Errorf("a write matching the tag: %d", code)
	}
	if code, _, _ := e.fileCall(t, http.MethodPut, "f", tok, strings.NewReader("4"), http.Header{"If-Match": {h.Get("ETag")}}); code != http.StatusPreconditionFailed {
		t.Errorf("a write with a stale tag: %d", code)
	}
	if _, got, _ := e.fileCall(t, http.MethodGet, "f", tok, nil, nil); string(got) != "3" {
		t.Errorf("the file holds %q, want 3", got)
	}
	for _, c := range []struct {
		method, path string
		want         int
	}{
		{http.MethodPut, "g?mode=4755", http.StatusBadRequest},
		{http.MethodPut, "g?mode=9", http.StatusBadRequest},
		{http.MethodPut, "dir/", http.StatusBadRequest},
		{http.MethodPut, "f/g", http.StatusConflict},
		{http.MethodPost, "x?op=chmod", http.StatusBadRequest},
		{http.MethodPost, "f?op=move", http.StatusBadRequest},
		{http.MethodDelete, "", http.StatusBadRequest},
		{http.MethodDelete, "f?recursive=yes", http.StatusBadRequest},
		{http.MethodGet, "f/", http.StatusConflict},
		{http.MethodGet, "nothing", http.StatusNotFound},
		{http.MethodGet, "?limit=0", http.StatusBadRequest},
		{http.MethodGet, "?limit=10001", http.StatusBadRequest},
		{http.MethodGet, "?after=!", http.StatusBadRequest},
		{http.MethodGet, "f?node=n1", http.StatusBadRequest}, // no cluster
		{http.MethodGet, strings.Repeat("n", 300), http.StatusBadRequest},
	} {
		if code, b, _ := e.fileCall(t, c.method, c.path, tok, strings.NewReader("x"), nil); code != c.want {
			t.Errorf("%s %s: %d %s, want %d", c.method, c.path, code, b, c.want)
		}
	}
}

// TestFilesScopesAndTenants: files:read reads and cannot write, exec
// scopes do neither, and a tenant never sees another's files.
func TestFilesScopesAndTenants(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	writer := e.token(t, "acme", ScopeFilesRead, ScopeFilesWrite)
	reader := e.token(t, "acme", ScopeFilesRead)
	execs := e.token(t, "acme", auth.ScopeCreate, auth.ScopeAttach, auth.ScopeWrite)
	other := e.token(t, "globex", ScopeFilesRead, ScopeFilesWrite)
	if code, _, _ := e.fileCall(t, http.MethodPut, "mine", writer, strings.NewReader("acme's"), nil); code != http.StatusCreated {
		t.Fatalf("PUT: %d", code)
	}
	if code, _, _ := e.fileCall(t, http.MethodGet, "mine", reader, nil, nil); code != http.StatusOK {
		t.Errorf("files:read GET: %d", code)
	}
	for _, m := range []string{http.MethodPut, http.MethodDelete, http.MethodPost} {
		if code, _, _ := e.fileCall(t, m, "mine?op=mkdir", reader, strings.NewReader("x"), nil); code != http.StatusForbidden {
			t.Errorf("files:read %s: %d", m, code)
		}
	}
	if code, _, _ := e.fileCall(t, http.MethodGet, "mine", execs, nil, nil); code != http.StatusForbidden {
		t.Errorf("exec scopes GET: %d", code)
	}
	if code, _, _ := e.fileCall(t, http.MethodGet, "mine", other, nil, nil); code != http.StatusNotFound {
		t.Errorf("another tenant's GET: %d", code)
	}
	if code, b, _ := e.fileCall(t, http.MethodGet, "", other, nil, nil); code != http.StatusOK || strings.Contains(string(b), "mine") {
		t.Errorf("another tenant's listing: %d %s", code, b)
	}
}

// TestFilesNeverLeadOut: a symlink a program planted (to /, to /etc, to
// a file of the host) is refused for reads and writes alike, and the
// host's files are unchanged.
func TestFilesNeverLeadOut(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	tok := e.token(t, "acme", ScopeFilesRead, ScopeFilesWrite)
	e.runIn(t, "acme", "ln -s / /workspace/root; ln -s /etc/passwd /workspace/passwd; ln -s ../../.. /workspace/up")
	for _, p := range []string{"root/etc/passwd", "passwd", "up/etc/passwd", "root/"} {
		if code, b, _ := e.fileCall(t, http.MethodGet, p, tok, nil, nil); code != http.StatusForbidden {
			t.Errorf("GET %s: %d %.80s", p, code, b)
		}
	}
	for _, p := range []string{"root/tmp/planted", "up/planted"} {
		if code, _, _ := e.fileCall(t, http.MethodPut, p, tok, strings.NewReader("x"), nil); code != http.StatusForbidden {
			t.Errorf("PUT %s: %d", p, code)
		}
	}
	// PUT over the symlink itself replaces the link in the workspace.
	if code, _, _ := e.fileCall(t, http.MethodPut, "passwd", tok, strings.NewReader("mine"), nil); code != http.StatusOK {
		t.Errorf("PUT over a symlink's name: %d", code)
	}
	if b, err := readHostFile("/etc/passwd"); err != nil || strings.Contains(b, "mine") {
		t.Errorf("the host's /etc/passwd: %v", err)
	}
}

// TestFilesTarStreams: a tree goes in and out as tar (gzip=1 too); a
// stream with a device entry, or one through a symlink a program
// planted, is refused and leaves nothing.
func TestFilesTarStreams(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	tok := e.token(t, "acme", ScopeFilesRead, ScopeFilesWrite)
	var in bytes.Buffer
	zw := gzip.NewWriter(&in)
	tw := tar.NewWriter(zw)
	for _, f := range []struct{ name, body string }{{"a/one", "1"}, {"a/b/two", "22"}, {"three", "333"}} {
		tw.WriteHeader(&tar.Header{Name: f.name, Typeflag: tar.TypeReg, Mode: 0o600, Size: int64(len(f.body))})
		tw.Write([]byte(f.body))
	}
	tw.Close()
	zw.Close()
	code, b, _ := e.fileCall(t, http.MethodPut, "tree/?format=tar&gzip=1", tok, &in, nil)
	if code != http.StatusOK || !strings.Contains(string(b), `"written":6`) {
		t.Fatalf("PUT a tar: %d %s", code, b)
	}
	code, out, h := e.fileCall(t, http.MethodGet, "tree/?format=tar", tok, nil, nil)
	var got []string
	tr := tar.NewReader(bytes.NewReader(out))
	for {
		hdr, err := tr.Next()
		if err != nil {
			if err != io.EOF {
				t.Errorf("the tar answer: %v", err)
			}
			break
		}
		body, _ := io.ReadAll(tr)
		got = append(got, hdr.Name+"="+string(body))
	}
	if code != http.StatusOK || strings.Join(got, " ") != "a/= a/b/= a/b/two=22 a/one=1 three=333" || h.Get("Content-Type") != "application/x-tar" {
		t.Errorf("GET the tree as tar: %d %q %q", code, got, h.Get("Content-Type"))
	}
	// A device entry after a file: refused, and the file it made removed.
	var bad bytes.Buffer
	tw = tar.NewWriter(&bad)
	tw.WriteHeader(&tar.Header{Name: "made", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1})
	tw.Write([]byte("m"))
	tw.WriteHeader(&tar.Header{Name: "null", Typeflag: tar.TypeChar, Mode: 0o666, Devmajor: 1, Devminor: 3})
	tw.Close()
	if code, b, _ := e.fileCall(t, http.MethodPut, "bad/?format=tar", tok, &bad, nil); code != http.StatusBadRequest || !strings.Contains(string(b), "null") {
		t.Errorf("a tar with a device: %d %s", code, b)
	}
	if code, _, _ := e.fileCall(t, http.MethodGet, "bad/", tok, nil, nil); code != http.StatusNotFound {
		t.Errorf("after a refused tar, bad/ answers %d", code)
	}
	e.runIn(t, "acme", "ln -s /tmp /workspace/out")
	var through bytes.Buffer
	tw = tar.NewWriter(&through)
	tw.WriteHeader(&tar.Header{Name: "planted", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1})
	tw.Write([]byte("p"))
	tw.Close()
	if code, b, _ := e.fileCall(t, http.MethodPut, "out/?format=tar", tok, &through, nil); code != http.StatusForbidden {
		t.Errorf("a tar through a planted symlink: %d %s", code, b)
	}
	if _, err := os.Stat("/tmp/planted"); err == nil {
		t.Error("the tar wrote /tmp/planted")
	}
}

// TestFilesRaceASwappedSymlink: while a program in the sandbox swaps a
// directory's name between a directory of the workspace and a symlink
// to the host's /tmp as fast as it can, writes through that name land
// in the workspace or are refused: none reaches the host.
func TestFilesRaceASwappedSymlink(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	tok := e.token(t, "acme", ScopeFilesRead, ScopeFilesWrite)
	e.runIn(t, "acme", "mkdir -p /workspace/d")
	c := e.dial(t, e.token(t, "acme", auth.ScopeCreate, auth.ScopeWrite))
	defer c.close()
	id := execid.New()
	c.send(t, wire.Request{Type: wire.TypeStart, ID: id, Command: "/bin/sh", Args: []string{"-c",
		"cd /workspace && echo flipping && for i in $(seq 1 200000); do ln -sfn d flip; ln -sfn /tmp flip; done"}})
	c.expect(t, wire.MsgStarted)
	defer c.send(t, wire.Request{Type: wire.TypeCancel, ID: id})
	if !sandboxtest.Eventually(t, 30*time.Second, func() bool {
		_, b, _ := e.fileCall(t, http.MethodGet, "", tok, nil, nil)
		return strings.Contains(string(b), `"name":"flip","type":"symlink"`)
	}) {
		t.Fatal("the program never made flip")
	}
	mark := "race-" + execid.New()
	landed, refused := 0, 0
	for i := range 300 {
		code, b, _ := e.fileCall(t, http.MethodPut, fmt.Sprintf("flip/%s-%d", mark, i), tok, strings.NewReader("x"), nil)
		switch code {
		case http.StatusCreated:
			landed++
		case http.StatusForbidden, http.StatusNotFound, http.StatusConflict:
			refused++
		default:
			t.Fatalf("PUT %d: %d %s", i, code, b)
		}
	}
	if matches, _ := filepath.Glob("/tmp/" + mark + "*"); len(matches) > 0 {
		t.Fatalf("writes through the swapped symlink reached the host: %q", matches)
	}
	code, b, _ := e.fileCall(t, http.MethodGet, "d/?limit=10000", tok, nil, nil)
	var list apiFileList
	json.Unmarshal(b, &list)
	if code != http.StatusOK || len(list.Entries) != landed {
		t.Errorf("d/ holds %d files, %d writes landed (%d refused)", len(list.Entries), landed, refused)
	}
	t.Logf("%d writes landed in the workspace, %d refused", landed, refused)
}

// TestFilesOfAnExecution: under /v1/executions/{id}/files/ paths are
// relative to the directory the execution started in; one that started
// outside the workspace, and another tenant's, are refused.
func TestFilesOfAnExecution(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	tok := e.token(t, "acme", ScopeFilesRead, ScopeFilesWrite)
	e.runIn(t, "acme", "mkdir -p /workspace/proj")
	c := e.dial(t, e.token(t, "acme", auth.ScopeCreate))
	defer c.close()
	for id, cwd := range map[string]string{"in-proj": "/workspace/proj", "in-tmp": "/tmp"} {
		c.send(t, wire.Request{Type: wire.TypeStart, ID: id, Command: "/bin/sh", Args: []string{"-c", "sleep 60"}, Cwd: cwd})
		c.expect(t, wire.MsgStarted)
		defer c.send(t, wire.Request{Type: wire.TypeCancel, ID: id})
	}
	call := func(method, path string, body string) (int, string) {
		req, _ := http.NewRequestWithContext(t.Context(), method, e.http.URL+"/v1/executions/"+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := e.client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, b := call(http.MethodPut, "in-proj/files/notes/a.txt", "proj's"); code != http.StatusCreated {
		t.Fatalf("PUT relative to the execution: %d %s", code, b)
	}
	if code, b, _ := e.fileCall(t, http.MethodGet, "proj/notes/a.txt", tok, nil, nil); code != http.StatusOK || string(b) != "proj's" {
		t.Errorf("the file in the workspace: %d %q", code, b)
	}
	if code, b := call(http.MethodPost, "in-proj/files/notes/a.txt?op=move&to=b.txt", ""); code != http.StatusOK {
		t.Errorf("a move relative to the execution: %d %s", code, b)
	}
	if code, b := call(http.MethodGet, "in-proj/files/", ""); code != http.StatusOK || !strings.Contains(b, `"name":"b.txt"`) {
		t.Errorf("the execution's directory: %d %s", code, b)
	}
	if code, b := call(http.MethodGet, "in-tmp/files/x", ""); code != http.StatusConflict || !strings.Contains(b, "/tmp") {
		t.Errorf("an execution outside the workspace: %d %s", code, b)
	}
	other := e.token(t, "globex", ScopeFilesRead)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, e.http.URL+"/v1/executions/in-proj/files/b.txt", nil)
	req.Header.Set("Authorization", "Bearer "+other)
	if resp, err := e.client().Do(req); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("another tenant's execution: %v %v", resp.StatusCode, err)
	}
}

// TestFilesResumableUpload: an upload whose connection breaks mid-way
// keeps what arrived; HEAD tells the offset, the rest follows from it,
// and the finished file is byte-exact; a wrong offset is refused with
// the right one; an abandoned upload is gone.
func TestFilesResumableUpload(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	tok := e.token(t, "acme", ScopeFilesRead, ScopeFilesWrite)
	data := make([]byte, 8<<20)
	rand.Read(data)
	code, b, _ := e.fileCall(t, http.MethodPost, "up/big.bin?op=upload", tok, nil, nil)
	var up apiUpload
	if json.Unmarshal(b, &up); code != http.StatusCreated || len(up.ID) != 32 {
		t.Fatalf("start an upload: %d %s", code, b)
	}
	q := "up/big.bin?upload=" + up.ID
	patch := func(offset int, body io.Reader) (int, http.Header, error) {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPatch, e.http.URL+"/v1/files/"+q, body)
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Upload-Offset", strconv.Itoa(offset))
		resp, err := e.client().Do(req)
		if err != nil {
			return 0, nil, err
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header, nil
	}
	// The connection breaks after 3 MiB of the body.
	cut := io.MultiReader(bytes.NewReader(data[:3<<20]), readerFunc(func([]byte) (int, error) { return 0, errors.New("cut") }))
	if _, _, err := patch(0, cut); err == nil {
		t.Fatal("a body that breaks went through")
	}
	var offset int
	// The server may still be reading what was sent: HEAD answers 409
	// until it is done.
	if !sandboxtest.Eventually(t, 10*time.Second, func() bool {
		code, _, h := e.fileCall(t, http.MethodHead, q, tok, nil, nil)
		offset, _ = strconv.Atoi(h.Get("Upload-Offset"))
		return code == http.StatusOK && offset > 0
	}) || offset > 3<<20 {
		t.Fatalf("after the break the upload holds %d bytes", offset)
	}
	if code, h, err := patch(offset+1, bytes.NewReader(data[offset+1:])); err != nil || code != http.StatusConflict || h.Get("Upload-Offset") != strconv.Itoa(offset) {
		t.Errorf("a PATCH at the wrong offset: %d %v %v", code, h.Get("Upload-Offset"), err)
	}
	if code, h, err := patch(offset, bytes.NewReader(data[offset:])); err != nil || code != http.StatusNoContent || h.Get("Upload-Offset") != strconv.Itoa(len(data)) {
		t.Fatalf("the rest: %d %v %v", code, h, err)
	}
	if code, _, _ := e.fileCall(t, http.MethodGet, "up/big.bin", tok, nil, nil); code != http.StatusNotFound {
		t.Errorf("an unfinished upload is visible: %d", code)
	}
	if code, b, _ := e.fileCall(t, http.MethodPut, q+"&mode=0600", tok, nil, nil); code != http.StatusCreated {
		t.Fatalf("finish: %d %s", code, b)
	}
	if code, got, _ := e.fileCall(t, http.MethodGet, "up/big.bin", tok, nil, nil); code != http.StatusOK || !bytes.Equal(got, data) {
		t.Errorf("the finished file: %d, %d bytes, equal %v", code, len(got), bytes.Equal(got, data))
	}
	if code, b, _ := e.fileCall(t, http.MethodGet, "up/", tok, nil, nil); code != http.StatusOK || strings.Contains(string(b), "termgate-upload") {
		t.Errorf("the directory after: %d %s", code, b)
	}
	if code, b, _ = e.fileCall(t, http.MethodPost, "up/gone.bin?op=upload", tok, nil, nil); code != http.StatusCreated || json.Unmarshal(b, &up) != nil {
		t.Fatalf("start another upload: %d %s", code, b)
	}
	if code, _, _ := e.fileCall(t, http.MethodDelete, "up/gone.bin?upload="+up.ID, tok, nil, nil); code != http.StatusNoContent {
		t.Errorf("abandon: %d", code)
	}
	if code, _, _ := e.fileCall(t, http.MethodHead, "up/gone.bin?upload="+up.ID, tok, nil, nil); code != http.StatusNotFound {
		t.Errorf("an abandoned upload: %d", code)
	}
	if code, _, _ := e.fileCall(t, http.MethodHead, "up/gone.bin?upload=nothex", tok, nil, nil); code != http.StatusNotFound {
		t.Errorf("a bad upload id: %d", code)
	}
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// TestFilesOperationsAtOnce: beyond maxFileOps operations under way, a
// request is refused 429 capacity, and served again once one ends.
func TestFilesOperationsAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	tok := e.token(t, "acme", ScopeFilesRead)
	for range maxFileOps { // the operations under way
		e.srv.fileOps <- struct{}{}
	}
	if code, b, _ := e.fileCall(t, http.MethodGet, "", tok, nil, nil); code != http.StatusTooManyRequests || !strings.Contains(string(b), "capacity") {
		t.Errorf("beyond %d operations: %d %s", maxFileOps, code, b)
	}
	<-e.srv.fileOps
	if code, b, _ := e.fileCall(t, http.MethodGet, "", tok, nil, nil); code != http.StatusOK {
		t.Errorf("once one ended: %d %s", code, b)
	}
	for range maxFileOps - 1 {
		<-e.srv.fileOps
	}
}
