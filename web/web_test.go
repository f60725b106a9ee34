package web

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
)

var builtFS = fstest.MapFS{
	"dist/placeholder.html": {Data: []byte("<p>not built</p>")},
	"dist/index.html":       {Data: []byte("<!doctype html><title>termgate</title>")},
	"dist/app.js":           {Data: []byte("console.log(1)")},
	"dist/app.css":          {Data: []byte("body{}")},
}

var placeholderFS = fstest.MapFS{
	"dist/placeholder.html": {Data: []byte("<p>not built</p>")},
}

func serve(t *testing.T, h http.Handler, method, path string) *httptest.ResponseRecorder {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(method, path, nil))
	return w
}

func TestHandlerServesBuiltPage(t *testing.T) {
	t.Parallel()
	h := handler(loadAssets(builtFS))
	tests := []struct {
		path, contentType, cache, body string
	}{
		{"/", "text/html; charset=utf-8", "no-store", "<title>termgate</title>"},
		{"/app.js", "text/javascript; charset=utf-8", "no-cache", "console.log(1)"},
		{"/app.css", "text/css; charset=utf-8", "no-cache", "body{}"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			t.Parallel()
			w := serve(t, h, http.MethodGet, tt.path)
			if w.Code != http.StatusOK {
				t.Fatalf("status %d, want 200", w.Code)
			}
			checkSecurityHeaders(t, w.Header())
			if got := w.Header().Get("Content-Type"); got != tt.contentType {
				t.Errorf("Content-Type %q, want %q", got, tt.contentType)
			}
			if got := w.Header().Get("Cache-Control"); got != tt.cache {
				t.Errorf("Cache-Control %q, want %q", got, tt.cache)
			}
			if !strings.Contains(w.Body.String(), tt.body) {
				t.Errorf("body %q, want it to contain %q", w.Body.String(), tt.body)
			}
		})
	}
}

func checkSecurityHeaders(t *testing.T, h http.Header) {
	t.Helper()
	want := map[string]string{
		"Content-Security-Policy": "default-src 'self'; connect-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
		"X-Content-Type-Options":  "nosniff",
		"Referrer-Policy":         "no-referrer",
	}
	for k, v := range want {
		if got := h.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
}

func TestHandlerPlaceholder(t *testing.T) {
	t.Parallel()
	if isBuilt(placeholderFS) || !isBuilt(builtFS) {
		t.Fatal("isBuilt does not tell the placeholder from the bundle")
	}
	h := handler(loadAssets(placeholderFS))
	w := serve(t, h, http.MethodGet, "/")
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "not built") {
		t.Fatalf("GET / = %d %q, want 200 and the placeholder", w.Code, w.Body.String())
	}
	checkSecurityHeaders(t, w.Header())
	if got := w.Header().Get("Cache-Control"); got != "no-store" {
		t.Errorf("Cache-Control %q, want no-store", got)
	}
	for _, p := range []string{"/app.js", "/app.css"} {
		if w := serve(t, h, http.MethodGet, p); w.Code != http.StatusNotFound {
			t.Errorf("GET %s without a bundle = %d, want 404", p, w.Code)
		}
	}
}

func TestHandlerRefuses(t *testing.T) {
	t.Parallel()
	h := handler(loadAssets(builtFS))
	tests := []struct {
		method, path string
		code         int
	}{
		{http.MethodGet, "/index.html", http.StatusNotFound},
		{http.MethodGet, "/placeholder.html", http.StatusNotFound},
		{http.MethodGet, "/dist/app.js", http.StatusNotFound},
		{http.MethodGet, "/../web.go", http.StatusNotFound},
		{http.MethodGet, "/favicon.ico", http.StatusNotFound},
		{http.MethodPost, "/", http.StatusMethodNotAllowed},
		{http.MethodPut, "/app.js", http.StatusMethodNotAllowed},
		{http.MethodDelete, "/app.css", http.StatusMethodNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.method+tt.path, func(t *testing.T) {
			t.Parallel()
			w := serve(t, h, tt.method, tt.path)
			if w.Code != tt.code {
				t.Fatalf("status %d, want %d", w.Code, tt.code)
			}
			checkSecurityHeaders(t, w.Header())
			if tt.code == http.StatusMethodNotAllowed && w.Header().Get("Allow") != "GET, HEAD" {
				t.Errorf("Allow %q, want GET, HEAD", w.Header().Get("Allow"))
			}
		})
	}
}

func TestHandlerHead(t *testing.T) {
	t.Parallel()
	w := serve(t, handler(loadAssets(builtFS)), http.MethodHead, "/app.js")
	if w.Code != http.StatusOK || w.Body.Len() != 0 {
		t.Fatalf("HEAD = %d with %d body bytes, want 200 and none", w.Code, w.Body.Len())
	}
	if w.Header().Get("Content-Length") != "14" {
		t.Errorf("Content-Length %q, want 14", w.Header().Get("Content-Length"))
	}
}

// TestEmbedded checks the real embedded tree: the page is always there,
// the bundle or the placeholder.
func TestEmbedded(t *testing.T) {
	t.Parallel()
	w := serve(t, Handler(), http.MethodGet, "/")
	if w.Code != http.StatusOK {
		t.Fatalf("GET / = %d, want 200", w.Code)
	}
	if got := serve(t, Handler(), http.MethodGet, "/app.js").Code; Built() != (got == http.StatusOK) {
		t.Errorf("Built() = %v but GET /app.js = %d", Built(), got)
	}
}

func TestHandlerGzip(t *testing.T) {
	t.Parallel()
	script := strings.Repeat("console.log('termgate');\n", 200)
	fsys := fstest.MapFS{
		"dist/index.html": {Data: []byte("<!doctype html><title>termgate</title>")},
		"dist/app.js":     {Data: []byte(script)},
		"dist/app.css":    {Data: []byte("body{}")},
	}
	h := handler(loadAssets(fsys))
	get := func(accept string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, "/app.js", nil)
		if accept != "" {
			r.Header.Set("Accept-Encoding", accept)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	tests := []struct {
		accept string
		gzip   bool
	}{
		{"", false},
		{"gzip, deflate, br", true},
		{"br;q=1.0, GZIP;q=0.5", true},
		{"gzip;q=0", false},
		{"gzip;q=0.0, *", false},
		{"*", true},
		{"identity", false},
		{"gzip;x=1;q=0", false},
		{"gzip;q=NaN, *", false},
	}
	etags := map[bool]string{}
	for _, tt := range tests {
		w := get(tt.accept)
		if w.Code != http.StatusOK || w.Header().Get("Vary") != "Accept-Encoding" {
			t.Fatalf("Accept-Encoding %q: status %d, Vary %q", tt.accept, w.Code, w.Header().Get("Vary"))
		}
		body := w.Body.Bytes()
		if n := w.Header().Get("Content-Length"); n != strconv.Itoa(len(body)) {
			t.Errorf("Accept-Encoding %q: Content-Length %q for %d bytes", tt.accept, n, len(body))
		}
		if gz := w.Header().Get("Content-Encoding") == "gzip"; gz != tt.gzip {
			t.Errorf("Accept-Encoding %q: gzip %v, want %v", tt.accept, gz, tt.gzip)
		} else if gz {
			zr, err := gzip.NewReader(bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			if body, err = io.ReadAll(zr); err != nil {
				t.Fatal(err)
			}
		}
		if string(body) != script {
			t.Errorf("Accept-Encoding %q: body differs from the script", tt.accept)
		}
		etags[tt.gzip] = w.Header().Get("ETag")
	}
	if etags[true] == etags[false] {
		t.Errorf("one ETag %s for both encodings", etags[true])
	}
	// A small file is not worth compressing.
	r := httptest.NewRequest(http.MethodGet, "/app.css", nil)
	r.Header.Set("Accept-Encoding", "gzip")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Header().Get("Content-Encoding") != "" || w.Body.String() != "body{}" {
		t.Errorf("app.css: encoding %q, body %q", w.Header().Get("Content-Encoding"), w.Body.String())
	}
}

// TestHandlerServesTheBuildsGzip: the build's compressed copy (NAME.gz)
// is served as it is, so the server compresses nothing as it starts; a
// copy that does not hold the file (a bundle rebuilt without it) is
// never served: the file is compressed at load instead.
func TestHandlerServesTheBuildsGzip(t *testing.T) {
	t.Parallel()
	script := strings.Repeat("console.log('termgate');\n", 200)
	gzipped := func(s, name string) []byte {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		zw.Name = name // marks the copy: compressing at load names nothing
		zw.Write([]byte(s))
		zw.Close()
		return buf.Bytes()
	}
	built := gzipped(script, "built")
	stale := gzipped(strings.Repeat("console.log('old');\n", 200), "stale")
	for _, tt := range []struct {
		name string
		gz   []byte
		want string // the served copy's gzip name
	}{
		{"the build's copy", built, "built"},
		{"a stale copy", stale, ""},
		{"a broken copy", built[:len(built)/2], ""},
	} {
		fsys := fstest.MapFS{
			"dist/index.html": {Data: []byte("<!doctype html><title>termgate</title>")},
			"dist/app.js":     {Data: []byte(script)},
			"dist/app.js.gz":  {Data: tt.gz},
			"dist/app.css":    {Data: []byte("body{}")},
		}
		r := httptest.NewRequest(http.MethodGet, "/app.js", nil)
		r.Header.Set("Accept-Encoding", "gzip")
		w := httptest.NewRecorder()
		handler(loadAssets(fsys)).ServeHTTP(w, r)
		if w.Header().Get("Content-Encoding") != "gzip" {
			t.Fatalf("%s: not compressed", tt.name)
		}
		zr, err := gzip.NewReader(w.Body)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		body, err := io.ReadAll(zr)
		if err != nil || string(body) != script {
			t.Errorf("%s: served %d bytes (%v), not the script", tt.name, len(body), err)
		}
		if zr.Name != tt.want {
			t.Errorf("%s: served the copy named %q, want %q", tt.name, zr.Name, tt.want)
		}
	}
}
