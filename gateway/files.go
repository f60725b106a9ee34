package gateway

// The files API reads and writes the caller's tenant's workspace (the
// one its sandboxes see at /workspace) over plain HTTP: PROTOCOL.md,
// "Files", is its contract. Every operation runs as the tenant
// (sandbox/files), never as termgate.

import (
	"compress/gzip"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/termgate/termgate/gateway/auth"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/sandbox/files"
)

// Scopes of the files API. Neither implies the other, and no exec scope
// implies either.
const (
	ScopeFilesRead  = "files:read"
	ScopeFilesWrite = "files:write"
)

// Bounds of the files API.
const (
	// filesListDefault and filesListMax are a listing's page, by
	// default and at most.
	filesListDefault = 1000
	filesListMax     = 10000
	// filesBodyIdle ends a write whose body sends nothing for this long.
	filesBodyIdle = 60 * time.Second
	// maxFileOps bounds the file operations under way on the server at
	// once: each holds an OS thread as its tenant.
	maxFileOps = 64
)

// Audit events of the files API.
const (
	eventFileWrite  = "file-write"   // before: who writes where
	eventFileKept   = "file-written" // after: the bytes kept, or why none
	eventFileDelete = "file-delete"
	eventFileMkdir  = "file-mkdir"
	eventFileMove   = "file-move"
)

// filesRoutes adds the files API to mux.
// Under /v1/executions/{id}/files/ paths are relative to the directory
// the execution started in, and the request goes to the execution's node.
func (a *httpAPI) filesRoutes(mux *http.ServeMux) {
	for _, base := range []string{"/v1/files/", "/v1/executions/{id}/files/"} {
		mux.HandleFunc("GET "+base+"{path...}", a.fileRoute(ScopeFilesRead, a.getFile))
		mux.HandleFunc("PUT "+base+"{path...}", a.fileRoute(ScopeFilesWrite, a.putFile))
		mux.HandleFunc("DELETE "+base+"{path...}", a.fileRoute(ScopeFilesWrite, a.deleteFile))
		mux.HandleFunc("POST "+base+"{path...}", a.fileRoute(ScopeFilesWrite, a.postFile))
		mux.HandleFunc("PATCH "+base+"{path...}", a.fileRoute(ScopeFilesWrite, a.patchFile))
	}
}

// fileHandler serves one authorised request of the files API on the
// tenant's tree, p the workspace path it names (filePath).
type fileHandler func(w http.ResponseWriter, r *http.Request, c auth.Claims, t *files.Tree, p string) error

// fileRoute authorises, takes the request to its node (onNode), resolves
// its path and holds one of maxFileOps while h runs.
func (a *httpAPI) fileRoute(scope string, h fileHandler) http.HandlerFunc {
	return a.route(scope, a.onNode(func(w http.ResponseWriter, r *http.Request, c auth.Claims) error {
		p, err := a.filePath(r, c, r.PathValue("path"))
		if err != nil {
			return err
		}
		t, done, err := a.tree(c)
		if err != nil {
			return err
		}
		defer done()
		return h(w, r, c, t, p)
	}))
}

// onNode serves a request of /v1/files/ with ?node=NODE on that node of
// the cluster: the tenant has a workspace on each node that ran it.
func (a *httpAPI) onNode(h apiHandler) apiHandler {
	return func(w http.ResponseWriter, r *http.Request, c auth.Claims) error {
		node := r.URL.Query().Get("node")
		rt := a.s.route
		switch {
		case node == "":
			return h(w, r, c)
		case r.PathValue("id") != "":
			return badRequest("node= goes with /v1/files/: an execution's files are on its own node")
		case rt == nil:
			return badRequest("node=: this server is no node of a cluster")
		case node == rt.self():
			return h(w, r, c)
		}
		if _, ok := rt.cfg.Members.URL(node); !ok {
			return &apiError{wire.CodeNotFound, "node=" + node + ": no such node"}
		}
		if err := a.proxy(w, r, node, nil); err != nil {
			a.failUnavailable(w, r, c, err)
		}
		return nil
	}
}

// filePath is the workspace path a request names: its path, below the
// execution's working directory under /v1/executions/{id}/files/. A
// path ending in "/" keeps it.
func (a *httpAPI) filePath(r *http.Request, c auth.Claims, p string) (string, error) {
	id := r.PathValue("id")
	if id == "" {
		return p, nil
	}
	info, err := a.s.cfg.Supervisor.Get(c.Tenant, id)
	switch {
	case err != nil:
		return "", err
	case info.Workdir == "":
		return "", &apiError{wire.CodeConflict, "the execution's working directory (" + info.Cwd + ") is not in the workspace"}
	}
	dir := p == "" || strings.HasSuffix(p, "/")
	if p = path.Join(info.Workdir, p); dir {
		p += "/"
	}
	return p, nil
}

// tree is the caller's tenant's workspace, made on first use, and holds
// one of maxFileOps until done is called.
func (a *httpAPI) tree(c auth.Claims) (t *files.Tree, done func(), err error) {
	select {
	case a.s.fileOps <- struct{}{}:
	default:
		a.s.metrics.refuse(refusedFileOps)
		return nil, nil, &apiError{wire.CodeCapacity, fmt.Sprintf("the server runs %d file operations; retry later", maxFileOps)}
	}
	ws, err := a.s.workspace(c.Tenant)
	if err != nil {
		<-a.s.fileOps
		return nil, nil, err
	}
	return files.New(ws.Path, ws.UID, ws.GID), func() { <-a.s.fileOps }, nil
}

// apiFile is a file's entry in answers.
type apiFile struct {
	Name string `json:"name"`
	// Raw is the name's bytes (base64) when they are not UTF-8: Name
	// then shows them replaced.
	Raw    string `json:"raw,omitempty"`
	Type   string `json:"type"`
	Size   int64  `json:"size"`
	Mode   string `json:"mode"` // octal permission bits
	MTime  string `json:"mtime"`
	Target string `json:"target,omitempty"`
	ETag   string `json:"etag,omitempty"`
}

func fileEntry(e files.Entry) apiFile {
	f := apiFile{Name: e.Name, Type: string(e.Type), Size: e.Size, Mode: fmt.Sprintf("%04o", uint32(e.Mode)),
		MTime: e.MTime.UTC().Format(time.RFC3339Nano), Target: e.Target}
	if !utf8.ValidString(e.Name) {
		f.Name, f.Raw = strings.ToValidUTF8(e.Name, "\uFFFD"), base64.StdEncoding.EncodeToString([]byte(e.Name))
	}
	if e.Type == files.TypeFile {
		f.ETag = e.ETag()
	}
	return f
}

type apiFileList struct {
	Entries []apiFile `json:"entries"`
	// Next is the after of the next page, opaque (the last name's bytes
	// in unpadded base64url); empty on the last page.
	Next string `json:"next,omitempty"`
}

// getFile answers a file's bytes (ranges and conditions as http.ServeContent
// does them), or a directory's entries when the path ends in "/".
func (a *httpAPI) getFile(w http.ResponseWriter, r *http.Request, c auth.Claims, t *files.Tree, p string) error {
	if id := r.URL.Query().Get("upload"); id != "" {
		n, err := t.UploadOffset(p, id)
		if err != nil {
			return filesError(err)
		}
		w.Header().Set("Upload-Offset", strconv.FormatInt(n, 10))
		a.respond(w, http.StatusOK, apiUpload{ID: id, Offset: n})
		return nil
	}
	switch tarred, err := tarQuery(r); {
	case err != nil:
		return err
	case tarred:
		return a.tarOut(w, r, t, p)
	case p == "" || strings.HasSuffix(p, "/"):
		return a.listFiles(w, r, t, p)
	}
	f, e, err := t.Open(p)
	if err != nil {
		return filesError(err)
	}
	defer f.Close()
	h := w.Header()
	h.Set("ETag", e.ETag())
	h.Set("X-Termgate-Mode", fmt.Sprintf("%04o", uint32(e.Mode)))
	// The bytes are the tenant's, served from the gateway's origin: never
	// a page a browser would run.
	h.Set("Content-Type", "application/octet-stream")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "sandbox")
	h.Set("Content-Disposition", "attachment; filename*=UTF-8''"+url.PathEscape(e.Name))
	h.Set("Cache-Control", "no-cache")
	http.ServeContent(w, r, "", e.MTime, &countingReadSeeker{f, func(n int) { a.s.metrics.fileBytes("out", n) }})
	return nil
}

// countingReadSeeker counts what is read of a file.
type countingReadSeeker struct {
	io.ReadSeeker
	count func(int)
}

func (c *countingReadSeeker) Read(p []byte) (int, error) {
	n, err := c.ReadSeeker.Read(p)
	c.count(n)
	return n, err
}

// listFiles answers a page of the directory's entries.
func (a *httpAPI) listFiles(w http.ResponseWriter, r *http.Request, t *files.Tree, p string) error {
	q := r.URL.Query()
	limit := filesListDefault
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > filesListMax {
			return badRequest(fmt.Sprintf("limit must be 1 to %d", filesListMax))
		}
		limit = n
	}
	after, err := base64.RawURLEncoding.DecodeString(q.Get("after"))
	if err != nil {
		return badRequest("after must be a listing's next")
	}
	entries, more, err := t.List(p, string(after), limit)
	if err != nil {
		return filesError(err)
	}
	out := apiFileList{Entries: make([]apiFile, 0, len(entries))}
	for _, e := range entries {
		out.Entries = append(out.Entries, fileEntry(e))
	}
	if more {
		out.Next = base64.RawURLEncoding.EncodeToString([]byte(entries[len(entries)-1].Name))
	}
	a.respond(w, http.StatusOK, out)
	return nil
}

// putFile writes a file from the body, whole or not at all.
func (a *httpAPI) putFile(w http.ResponseWriter, r *http.Request, c auth.Claims, t *files.Tree, p string) error {
	tarred, err := tarQuery(r)
	switch {
	case err != nil:
		return err
	case tarred:
		return a.tarIn(w, r, c, t, p)
	case p == "" || strings.HasSuffix(p, "/"):
		return badRequest("PUT writes a file: name one, not a directory (or send a tar stream with format=tar)")
	}
	o := files.WriteOptions{Check: preconditions(r)}
	if s := r.URL.Query().Get("mode"); s != "" {
		m, err := strconv.ParseUint(s, 8, 32)
		if err != nil || m > 0o777 {
			return badRequest("mode must be octal permission bits, 0 to 0777 (no setuid, setgid or sticky bit)")
		}
		o.Mode = fs.FileMode(m)
	}
	_, existed := t.Stat(p)
	var e files.Entry
	if id := r.URL.Query().Get("upload"); id != "" {
		size, _ := t.UploadOffset(p, id)
		e, err = t.FinishUpload(p, id, o)
		err = filesError(err)
		if err == nil || errorCodeOf(err) != wire.CodeNotFound {
			a.auditWritten(r, c, p, uint64(size), err)
		}
	} else {
		if err := a.auditFile(r, c, eventFileWrite, p, ""); err != nil {
			return err
		}
		body := a.fileBody(w, r)
		defer body.done()
		e, err = t.Write(p, body, o)
		err = filesError(err)
		a.auditWritten(r, c, p, body.n, err)
	}
	if err != nil {
		return err
	}
	status := http.StatusCreated
	if existed == nil {
		status = http.StatusOK
	}
	w.Header().Set("ETag", e.ETag())
	a.respond(w, status, fileEntry(e))
	return nil
}

// tarQuery reads format=tar (and gzip=1, only with it).
func tarQuery(r *http.Request) (bool, error) {
	q := r.URL.Query()
	gz, err := boolQuery(r, "gzip")
	switch f := q.Get("format"); {
	case err != nil:
		return false, err
	case f != "" && f != "tar":
		return false, badRequest("format must be tar")
	case gz && f != "tar":
		return false, badRequest("gzip=1 goes with format=tar")
	}
	return q.Get("format") == "tar", nil
}

// tarOut answers the tree below a directory as a tar stream (gzip=1:
// compressed). A failure once it began is told in the X-Termgate-Error
// trailer, and the stream lacks its end; X-Termgate-Skipped counts the
// devices, fifos and sockets left out.
func (a *httpAPI) tarOut(w http.ResponseWriter, r *http.Request, t *files.Tree, p string) error {
	gz, _ := boolQuery(r, "gzip")
	if _, err := t.Stat(p); err != nil {
		return filesError(err)
	}
	h := w.Header()
	name := path.Base("/" + strings.TrimSuffix(p, "/"))
	if name == "/" {
		name = "workspace"
	}
	ext, typ := ".tar", "application/x-tar"
	if gz {
		ext, typ = ".tar.gz", "application/gzip"
	}
	h.Set("Content-Type", typ)
	h.Set("Content-Disposition", "attachment; filename*=UTF-8''"+url.PathEscape(name+ext))
	h.Set("Cache-Control", "no-store")
	h.Set("Trailer", "X-Termgate-Error, X-Termgate-Skipped")
	out := io.Writer(&countingWriter{w, func(n int) { a.s.metrics.fileBytes("out", n) }})
	var zw *gzip.Writer
	if gz {
		zw = gzip.NewWriter(out)
		out = zw
	}
	skipped, err := t.TarOut(p, out)
	if err == nil && zw != nil {
		err = zw.Close()
	}
	if err != nil {
		h.Set("X-Termgate-Error", filesErrorCode(err))
		a.s.log.Info("a tar stream ended early", "err", err)
	}
	h.Set("X-Termgate-Skipped", strconv.Itoa(skipped))
	return nil
}

// countingWriter counts what is written.
type countingWriter struct {
	io.Writer
	count func(int)
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.Writer.Write(p)
	c.count(n)
	return n, err
}

// filesErrorCode is the code a files error is answered with.
func filesErrorCode(err error) string { return errorCodeOf(filesError(err)) }

// tarIn extracts a tar stream (gzip=1: compressed) into a directory.
func (a *httpAPI) tarIn(w http.ResponseWriter, r *http.Request, c auth.Claims, t *files.Tree, p string) error {
	gz, _ := boolQuery(r, "gzip")
	if err := a.auditFile(r, c, eventFileWrite, p, ""); err != nil {
		return err
	}
	body := a.fileBody(w, r)
	defer body.done()
	in := io.Reader(body)
	if gz {
		zr, err := gzip.NewReader(body)
		if err != nil {
			return badRequest("gzip=1, but the body is not gzip: " + err.Error())
		}
		in = zr
	}
	n, err := t.TarIn(p, in)
	err = filesError(err)
	a.auditWritten(r, c, p, uint64(n), err)
	if err != nil {
		return err
	}
	a.respond(w, http.StatusOK, struct {
		Written int64 `json:"written"`
	}{n})
	return nil
}

// preconditions turns If-Match and If-None-Match into a write's check,
// nil without them.
func preconditions(r *http.Request) func(old *files.Entry) error {
	match, noneMatch := r.Header.Get("If-Match"), r.Header.Get("If-None-Match")
	if match == "" && noneMatch == "" {
		return nil
	}
	return func(old *files.Entry) error {
		tag := ""
		if old != nil && old.Type == files.TypeFile {
			tag = old.ETag()
		}
		if match != "" && !etagListHas(match, tag) {
			return files.ErrChanged
		}
		if noneMatch != "" && etagListHas(noneMatch, tag) {
			return files.ErrChanged
		}
		return nil
	}
}

// etagListHas reports whether an If-Match style list names tag ("*":
// any file there is).
func etagListHas(list, tag string) bool {
	for t := range strings.SplitSeq(list, ",") {
		t = strings.TrimSpace(t)
		if t == "*" && tag != "" || t == tag && tag != "" {
			return true
		}
	}
	return false
}

// idleBody is a request body that must keep coming: each read may wait
// filesBodyIdle at most. It counts what it read.
type idleBody struct {
	r     io.Reader
	rc    *http.ResponseController
	count func(int)
	n     uint64
}

// fileBody is r's body for a write; done lifts its deadline, which is
// the connection's and would end the next request on it.
func (a *httpAPI) fileBody(w http.ResponseWriter, r *http.Request) *idleBody {
	return &idleBody{r: r.Body, rc: http.NewResponseController(w), count: func(n int) { a.s.metrics.fileBytes("in", n) }}
}

func (b *idleBody) Read(p []byte) (int, error) {
	b.rc.SetReadDeadline(time.Now().Add(filesBodyIdle))
	n, err := b.r.Read(p)
	b.n += uint64(n)
	b.count(n)
	return n, err
}

func (b *idleBody) done() { b.rc.SetReadDeadline(time.Time{}) }

// deleteFile removes a file or an empty directory, or a tree with
// ?recursive=1.
func (a *httpAPI) deleteFile(w http.ResponseWriter, r *http.Request, c auth.Claims, t *files.Tree, p string) error {
	recursive, err := boolQuery(r, "recursive")
	if err != nil {
		return err
	}
	if id := r.URL.Query().Get("upload"); id != "" {
		if err := t.AbortUpload(p, id); err != nil {
			return filesError(err)
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	if err := a.auditFile(r, c, eventFileDelete, p, ""); err != nil {
		return err
	}
	if err := t.Remove(p, recursive); err != nil {
		return filesError(err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// postFile runs ?op=mkdir (the directory and those on its way) or
// ?op=move&to=PATH.
func (a *httpAPI) postFile(w http.ResponseWriter, r *http.Request, c auth.Claims, t *files.Tree, p string) error {
	q := r.URL.Query()
	op, to := q.Get("op"), q.Get("to")
	switch {
	case op == "move" && to == "":
		return badRequest("op=move needs to=PATH")
	case op != "mkdir" && op != "move" && op != "upload":
		return badRequest("op must be mkdir, move or upload")
	}
	if to != "" {
		var err error
		if to, err = a.filePath(r, c, to); err != nil {
			return err
		}
	}
	if op == "upload" {
		return a.startUpload(w, r, c, t, p)
	}
	status, event := http.StatusCreated, eventFileMkdir
	if op == "move" {
		status, event = http.StatusOK, eventFileMove
	}
	if err := a.auditFile(r, c, event, p, to); err != nil {
		return err
	}
	var e files.Entry
	var err error
	if op == "mkdir" {
		e, err = t.Mkdir(p)
	} else {
		e, err = t.Move(p, to)
	}
	if err != nil {
		return filesError(err)
	}
	a.respond(w, status, fileEntry(e))
	return nil
}

// apiUpload is a resumable upload: its id and the bytes it holds.
type apiUpload struct {
	ID     string `json:"upload"`
	Offset int64  `json:"offset"`
}

// startUpload begins a resumable upload of the file at p.
func (a *httpAPI) startUpload(w http.ResponseWriter, r *http.Request, c auth.Claims, t *files.Tree, p string) error {
	if p == "" || strings.HasSuffix(p, "/") {
		return badRequest("an upload writes a file: name one, not a directory")
	}
	if err := a.auditFile(r, c, eventFileWrite, p, ""); err != nil {
		return err
	}
	id, err := t.StartUpload(p)
	if err != nil {
		return filesError(err)
	}
	a.respond(w, http.StatusCreated, apiUpload{ID: id})
	return nil
}

// patchFile adds the body to a resumable upload at Upload-Offset, the
// offset it reached. The answer's Upload-Offset is the new one; a body
// that breaks keeps what arrived, and HEAD tells where to resume.
func (a *httpAPI) patchFile(w http.ResponseWriter, r *http.Request, c auth.Claims, t *files.Tree, p string) error {
	id := r.URL.Query().Get("upload")
	offset, err := strconv.ParseInt(r.Header.Get("Upload-Offset"), 10, 64)
	switch {
	case id == "":
		return badRequest("PATCH adds to an upload: upload=ID (POST op=upload starts one)")
	case err != nil || offset < 0:
		return badRequest("Upload-Offset must be the offset the upload reached (HEAD tells it)")
	}
	body := a.fileBody(w, r)
	defer body.done()
	end, err := t.Append(p, id, offset, body)
	w.Header().Set("Upload-Offset", strconv.FormatInt(end, 10))
	if err != nil {
		return filesError(err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// boolQuery reads a query parameter of 1 or 0 (absent: false).
func boolQuery(r *http.Request, name string) (bool, error) {
	switch r.URL.Query().Get(name) {
	case "", "0":
		return false, nil
	case "1":
		return true, nil
	}
	return false, badRequest(name + " must be 1 or 0")
}

// filesError names a files error for the answer.
func filesError(err error) error {
	var full *files.NoSpaceError
	switch {
	case errors.As(err, &full):
		return &apiError{wire.CodeInsufficientStorage, fmt.Sprintf("the workspace is full: %d bytes were written, and none of them kept", full.Written)}
	case errors.Is(err, files.ErrBadArchive):
		return badRequest(strings.TrimPrefix(err.Error(), "files: "))
	case errors.Is(err, files.ErrInvalidPath):
		return badRequest(strings.TrimPrefix(err.Error(), "files: "))
	case errors.Is(err, fs.ErrNotExist):
		return &apiError{wire.CodeNotFound, "no such file or directory"}
	case errors.Is(err, fs.ErrPermission):
		return &apiError{wire.CodeForbidden, "the tenant may not do that there, or the path leads out of its workspace"}
	case errors.Is(err, files.ErrUploadBusy):
		return &apiError{wire.CodeConflict, "an earlier request is still adding to the upload: ask again shortly"}
	case errors.Is(err, files.ErrUploadOffset):
		return &apiError{wire.CodeConflict, err.Error()[len("files: "):] + " (Upload-Offset says so too)"}
	case errors.Is(err, files.ErrChanged):
		return &apiError{wire.CodePreconditionFailed, "the file is not as If-Match or If-None-Match says"}
	case errors.Is(err, files.ErrIsDir):
		return &apiError{wire.CodeConflict, "it is a directory"}
	case errors.Is(err, files.ErrNotDir):
		return &apiError{wire.CodeConflict, "a name on the way is not a directory"}
	case errors.Is(err, files.ErrNotEmpty):
		return &apiError{wire.CodeConflict, "the directory is not empty (recursive=1 removes a tree)"}
	case errors.Is(err, files.ErrNotRegular):
		return &apiError{wire.CodeConflict, "it is not a regular file"}
	case errors.Is(err, fs.ErrExist):
		return &apiError{wire.CodeConflict, "it exists"}
	}
	return err
}

// auditFile records a change of the workspace before it is made: the
// path, and where it moves to.
func (a *httpAPI) auditFile(r *http.Request, c auth.Claims, event, p, to string) error {
	if a.s.cfg.Audit == nil {
		return nil
	}
	rec := a.httpWho(r, c, event)
	rec.Path, rec.To = clip(p, auditMaxPath), clip(to, auditMaxPath)
	if a.s.cfg.Audit.Record(rec) != nil {
		return errAuditRefused
	}
	return nil
}

// auditWritten records how a write ended: the bytes it read, and the
// code of its refusal when nothing was kept.
func (a *httpAPI) auditWritten(r *http.Request, c auth.Claims, p string, n uint64, err error) {
	if a.s.cfg.Audit == nil {
		return
	}
	rec := a.httpWho(r, c, eventFileKept)
	rec.Path, rec.Bytes = clip(p, auditMaxPath), &n
	if err != nil {
		rec.Reason = errorCodeOf(err)
	}
	a.s.cfg.Audit.Happened(rec)
}

// errorCodeOf is the code an error is answered with.
func errorCodeOf(err error) string {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.code
	}
	return wire.CodeInternal
}

// auditMaxPath bounds a path in an audit record.
const auditMaxPath = 1024
