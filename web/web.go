// Package web serves termgate's browser terminal: an xterm.js page and the
// JavaScript client of the wire protocol (gateway/PROTOCOL.md), bundled by
// esbuild from web/src into web/dist and embedded in the binary.
//
// The bundle is built with npm (`cd web && npm ci && npm run build`, which
// `make run` does) and is not committed. A binary built without it still
// compiles and serves dist/placeholder.html, which says how to build the
// terminal; Built reports which of the two is embedded.
//
// Every answer carries a strict Content-Security-Policy: the page loads
// nothing but its own script and style and connects only to its own origin.
package web

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io"
	"io/fs"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

//go:embed dist
var dist embed.FS

// contentSecurityPolicy allows the page's own script, style and WebSocket
// only. 'unsafe-inline' styles are needed by xterm.js, which positions its
// rows and cursor with style attributes; scripts stay strictly 'self'.
const contentSecurityPolicy = "default-src 'self'; connect-src 'self'; img-src 'self' data:; " +
	"style-src 'self' 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

// asset is one embedded file ready to serve.
type asset struct {
	body        []byte
	gz          []byte // body gzip-compressed, when that is smaller
	contentType string
	etag        string
	cache       string
}

// assets maps request paths to files, built from the embedded tree on
// first use (compressing takes a few milliseconds no CLI command needs).
var assets = sync.OnceValue(func() map[string]asset { return loadAssets(dist) })

// Built reports whether the real browser terminal is embedded, rather than
// the placeholder page of a binary built without web/dist.
func Built() bool {
	return isBuilt(dist)
}

func isBuilt(fsys fs.FS) bool {
	_, err := fs.Stat(fsys, "dist/index.html")
	return err == nil
}

// loadAssets reads the page, its script and its style. The page is
// dist/index.html when the bundle was built, else dist/placeholder.html.
func loadAssets(fsys fs.FS) map[string]asset {
	m := make(map[string]asset)
	add := func(path, name, contentType, cache string) bool {
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return false
		}
		sum := sha256.Sum256(b)
		m[path] = asset{body: b, gz: compressed(fsys, name, b), contentType: contentType,
			etag: hex.EncodeToString(sum[:12]), cache: cache}
		return true
	}
	// The page is never cached, so a new binary's page (and through its
	// revalidated script) takes effect on the next load.
	if !add("/", "dist/index.html", "text/html; charset=utf-8", "no-store") {
		add("/", "dist/placeholder.html", "text/html; charset=utf-8", "no-store")
		return m
	}
	add("/app.js", "dist/app.js", "text/javascript; charset=utf-8", "no-cache")
	add("/app.css", "dist/app.css", "text/css; charset=utf-8", "no-cache")
	return m
}

// Handler returns the handler of the browser terminal: "/" (the page),
// "/app.js" and "/app.css"; any other path is 404 and any method but GET
// and HEAD is 405. Mount it at "/" next to the gateway's "/v1/" routes.
func Handler() http.Handler {
	return handler(assets())
}

func handler(files map[string]asset) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		a, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h.Set("Content-Type", a.contentType)
		h.Set("Cache-Control", a.cache)
		body, etag := a.body, a.etag
		if a.gz != nil {
			h.Set("Vary", "Accept-Encoding")
			if acceptsGzip(r.Header.Values("Accept-Encoding")) {
				// A strong ETag names one encoding of the file.
				body, etag = a.gz, etag+"-gzip"
				h.Set("Content-Encoding", "gzip")
			}
		}
		h.Set("ETag", `"`+etag+`"`)
		if h.Get("Content-Encoding") != "" {
			// ServeContent leaves the length out for an encoded body.
			h.Set("Content-Length", strconv.Itoa(len(body)))
		}
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
	})
}

// compressed returns the file name's contents b gzip-compressed: the
// build's copy, name.gz, when there is one and it holds exactly b (a bundle
// rebuilt without it leaves a stale one), else compressed here, which
// takes 30-40 ms for the script, before the server serves. Nil when
// compressing saves too little.
func compressed(fsys fs.FS, name string, b []byte) []byte {
	gz, err := fs.ReadFile(fsys, name+".gz")
	if err != nil || !gunzips(gz, b) {
		gz = compress(b)
	}
	return worthServing(gz, b)
}

// gunzips reports whether gz decompresses to exactly b.
func gunzips(gz, b []byte) bool {
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return false
	}
	got, err := io.ReadAll(io.LimitReader(zr, int64(len(b))+1))
	return err == nil && bytes.Equal(got, b)
}

// compress returns b gzip-compressed: the bundle's 357 KB script goes
// over the wire as 95 KB.
func compress(b []byte) []byte {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

// worthServing is gz, the compressed b, or nil when it saves too little.
func worthServing(gz, b []byte) []byte {
	if len(gz) > len(b)*9/10 {
		return nil
	}
	return gz
}

// acceptsGzip reports whether Accept-Encoding values accept gzip: named
// with a nonzero quality, or not named and "*" accepted.
func acceptsGzip(values []string) bool {
	gz, star := -1.0, -1.0
	for _, v := range values {
		for _, part := range strings.Split(v, ",") {
			coding, params, _ := strings.Cut(part, ";")
			q := 1.0
			for _, param := range strings.Split(params, ";") {
				k, val, _ := strings.Cut(param, "=")
				if strings.EqualFold(strings.TrimSpace(k), "q") {
					f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
					if err != nil || math.IsNaN(f) { // malformed: not acceptable
						f = 0
					}
					q = f
				}
			}
			switch strings.ToLower(strings.TrimSpace(coding)) {
			case "gzip", "x-gzip":
				gz = q
			case "*":
				star = q
			}
		}
	}
	if gz >= 0 {
		return gz > 0
	}
	return star > 0
}
