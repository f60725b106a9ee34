package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/termgate/termgate/sandbox/files"
)

// remoteArg reads a cp or ls argument: :PATH (the workspace), ID:PATH
// (relative to the directory execution ID started in), or a local path:
// one with no ":" before its first "/", or a drive's (C:\...). As with
// scp, ./ in front keeps a local name with a ":" local.
func remoteArg(arg string) (p, exec string, ok bool) {
	before, after, found := strings.Cut(arg, ":")
	switch {
	case !found || strings.ContainsAny(before, `/\`):
		return "", "", false
	case runtime.GOOS == "windows" && len(before) == 1 && (strings.HasPrefix(after, `\`) || strings.HasPrefix(after, "/")):
		return "", "", false
	}
	return after, before, true
}

// filesURL is the files API's URL of workspace path p (relative to the
// directory of execution cf.exec, when set).
func (cf clientFlags) filesURL(p string) string {
	segs := strings.Split(strings.TrimPrefix(p, "/"), "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	base := "/v1/files/"
	if cf.exec != "" {
		base = "/v1/executions/" + url.PathEscape(cf.exec) + "/files/"
	}
	return strings.TrimRight(cf.url, "/") + base + strings.Join(segs, "/")
}

// filesDo makes a files API request and returns the answer of a 2xx
// status; any other is the gateway's error.
func (cf clientFlags) filesDo(ctx context.Context, method, p string, query url.Values, body io.Reader, size int64) (*http.Response, error) {
	return cf.filesDoWith(ctx, method, p, query, nil, body, size)
}

// filesAnswer is an answer of the files API that is not 2xx.
type filesAnswer struct {
	status int
	msg    string
}

func (e *filesAnswer) Error() string { return e.msg }

// filesDoWith is filesDo with the request's headers.
func (cf clientFlags) filesDoWith(ctx context.Context, method, p string, query url.Values, header http.Header, body io.Reader, size int64) (*http.Response, error) {
	if cf.url == "" || cf.token == "" {
		return nil, usageError{errors.New("--url and --token (or TERMGATE_URL and TERMGATE_TOKEN) are required")}
	}
	u := cf.filesURL(p)
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.ContentLength = size
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Authorization", "Bearer "+cf.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reach the gateway: %w", err)
	}
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		return resp, nil
	}
	defer resp.Body.Close()
	ge := &filesAnswer{status: resp.StatusCode, msg: fmt.Sprintf("%s: the gateway answered %s", p, resp.Status)}
	var e struct{ Error, Message string }
	if json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&e) == nil && e.Message != "" {
		ge.msg = fmt.Sprintf("%s: %s (%s)", p, e.Message, e.Error)
	}
	return nil, ge
}

// runCp copies a file between this machine and the tenant's workspace:
// one of SRC and DST is :PATH.
func runCp(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	var cf clientFlags
	var recursive bool
	fs := cpFlags(&cf, &recursive)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		return usageError{errors.New("cp: want SRC and DST, one of them :PATH in the workspace or ID:PATH beside an execution")}
	}
	src, dst := fs.Arg(0), fs.Arg(1)
	rsrc, srcExec, fromRemote := remoteArg(src)
	rdst, dstExec, toRemote := remoteArg(dst)
	cf.exec = srcExec + dstExec // one of them is empty
	switch {
	case fromRemote == toRemote:
		return usageError{errors.New("cp: one of SRC and DST must be :PATH in the workspace (or ID:PATH beside an execution), the other a local path")}
	case toRemote && recursive:
		return cf.uploadTree(ctx, src, rdst)
	case toRemote:
		return cf.upload(ctx, src, rdst, stderr)
	case recursive:
		return cf.downloadTree(ctx, rsrc, dst)
	default:
		return cf.download(ctx, rsrc, dst, stderr)
	}
}

func cpFlags(cf *clientFlags, recursive *bool) *flag.FlagSet {
	fs := newClientFlagSet("cp", cf)
	fs.BoolVar(recursive, "r", false, "copy a directory's tree (a tar stream each way)")
	return fs
}

// uploadTree writes local directory src's tree into workspace
// directory dst (dst/NAME of src when dst ends in "/"), as a tar stream.
func (cf clientFlags) uploadTree(ctx context.Context, src, dst string) error {
	root, err := os.OpenRoot(src)
	if err != nil {
		return err
	}
	defer root.Close()
	if dst == "" || strings.HasSuffix(dst, "/") {
		dst += filepath.Base(filepath.Clean(src))
	}
	pr, pw := io.Pipe()
	go func() {
		_, err := files.Archive(root, ".", pw)
		pw.CloseWithError(err)
	}()
	resp, err := cf.filesDo(ctx, http.MethodPut, dst+"/", url.Values{"format": {"tar"}}, pr, -1)
	pr.CloseWithError(errors.New("cp: the gateway stopped reading"))
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// downloadTree writes workspace directory src's tree to local path dst
// (dst/NAME of src when dst is a directory): what it made is removed
// when the stream breaks.
func (cf clientFlags) downloadTree(ctx context.Context, src, dst string) error {
	if fi, err := os.Stat(dst); err == nil && fi.IsDir() {
		dst = filepath.Join(dst, path.Base("/"+strings.TrimSuffix(src, "/")))
	}
	resp, err := cf.filesDo(ctx, http.MethodGet, strings.TrimSuffix(src, "/")+"/", url.Values{"format": {"tar"}}, nil, 0)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	root, err := os.OpenRoot(filepath.Dir(dst))
	if err != nil {
		return err
	}
	defer root.Close()
	if _, err := files.Extract(root, filepath.Base(dst), resp.Body); err != nil {
		return fmt.Errorf("cp: %s: %w", src, err)
	}
	if e := resp.Trailer.Get("X-Termgate-Error"); e != "" {
		return fmt.Errorf("cp: %s: the gateway's tar stream ended early (%s)", src, e)
	}
	return nil
}

// upload writes local file src to workspace path dst (into it when it
// ends in "/"), with src's mode.
func (cf clientFlags) upload(ctx context.Context, src, dst string, stderr io.Writer) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("cp: %s is not a regular file (directories are not copied yet)", src)
	}
	if dst == "" || strings.HasSuffix(dst, "/") {
		dst += filepath.Base(src)
	}
	q := url.Values{"mode": {fmt.Sprintf("%04o", fi.Mode().Perm())}}
	pr := newProgress(stderr, "upload "+src, fi.Size())
	defer pr.done()
	if fi.Size() >= resumableFrom {
		return cf.uploadResumable(ctx, f, fi.Size(), dst, q, pr)
	}
	resp, err := cf.filesDo(ctx, http.MethodPut, dst, q, io.TeeReader(f, pr), fi.Size())
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// Resumable uploads: files of resumableFrom bytes or more are sent as
// one, which resumes from the offset the gateway has after a broken
// connection, resumeTries times at most.
const (
	resumableFrom = 16 << 20
	resumeTries   = 8
)

// uploadResumable sends f (size bytes) as a resumable upload to dst
// and puts it in place with query's mode.
func (cf clientFlags) uploadResumable(ctx context.Context, f *os.File, size int64, dst string, query url.Values, pr *progress) error {
	resp, err := cf.filesDo(ctx, http.MethodPost, dst, url.Values{"op": {"upload"}}, nil, 0)
	if err != nil {
		return err
	}
	var up struct{ Upload string }
	err = json.NewDecoder(resp.Body).Decode(&up)
	resp.Body.Close()
	if err != nil {
		return fmt.Errorf("cp: the gateway's answer: %w", err)
	}
	abandon := func() {
		if resp, err := cf.filesDo(context.WithoutCancel(ctx), http.MethodDelete, dst, url.Values{"upload": {up.Upload}}, nil, 0); err == nil {
			resp.Body.Close()
		}
	}
	var offset int64
	for try := 0; offset < size; try++ {
		h := http.Header{"Upload-Offset": {strconv.FormatInt(offset, 10)}}
		body := io.TeeReader(io.NewSectionReader(f, offset, size-offset), pr)
		resp, err := cf.filesDoWith(ctx, http.MethodPatch, dst, url.Values{"upload": {up.Upload}}, h, body, size-offset)
		if err == nil {
			resp.Body.Close()
			break
		}
		var ge *filesAnswer
		if errors.As(err, &ge) && ge.status != http.StatusConflict || ctx.Err() != nil || try == resumeTries {
			abandon()
			return err
		}
		if offset, err = cf.uploadOffset(ctx, dst, up.Upload); err != nil {
			abandon()
			return err
		}
		pr.n = offset
	}
	query.Set("upload", up.Upload)
	resp, err = cf.filesDo(ctx, http.MethodPut, dst, query, nil, 0)
	if err != nil {
		abandon()
		return err
	}
	resp.Body.Close()
	return nil
}

// uploadOffset asks where an upload is, while an earlier request still
// writes it (409) asking again, for up to a minute.
func (cf clientFlags) uploadOffset(ctx context.Context, dst, id string) (int64, error) {
	for pause := 100 * time.Millisecond; ; pause = min(2*pause, 5*time.Second) {
		resp, err := cf.filesDo(ctx, http.MethodHead, dst, url.Values{"upload": {id}}, nil, 0)
		if err == nil {
			resp.Body.Close()
			return strconv.ParseInt(resp.Header.Get("Upload-Offset"), 10, 64)
		}
		var ge *filesAnswer
		if !errors.As(err, &ge) || ge.status != http.StatusConflict || pause == 5*time.Second {
			return 0, err
		}
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return 0, context.Cause(ctx)
		}
	}
}

// download writes workspace file src to local path dst (into it when
// it is a directory), whole or not at all, with src's mode.
func (cf clientFlags) download(ctx context.Context, src, dst string, stderr io.Writer) error {
	if fi, err := os.Stat(dst); err == nil && fi.IsDir() || strings.HasSuffix(dst, string(os.PathSeparator)) {
		dst = filepath.Join(dst, path.Base(src))
	}
	resp, err := cf.filesDo(ctx, http.MethodGet, src, nil, nil, 0)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	mode := fs.FileMode(0o644)
	if m, err := strconv.ParseUint(resp.Header.Get("X-Termgate-Mode"), 8, 32); err == nil {
		mode = fs.FileMode(m).Perm()
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".termgate-*")
	if err != nil {
		return err
	}
	pr := newProgress(stderr, "download "+src, resp.ContentLength)
	n, err := io.Copy(io.MultiWriter(tmp, pr), resp.Body)
	pr.done()
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil && resp.ContentLength >= 0 && n != resp.ContentLength {
		err = fmt.Errorf("cp: %s: the gateway sent %d of %d bytes", src, n, resp.ContentLength)
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), mode)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), dst)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

// progress shows a transfer's bytes on a terminal, for transfers of
// progressFrom bytes or more; elsewhere it writes nothing.
type progress struct {
	w          io.Writer
	what       string
	size, n    int64
	last       time.Time
	shown, off bool
}

const progressFrom = 4 << 20

func newProgress(w io.Writer, what string, size int64) *progress {
	f, ok := w.(*os.File)
	return &progress{w: w, what: what, size: size, off: !ok || !isTerminal(f) || size < progressFrom}
}

func (p *progress) Write(b []byte) (int, error) {
	p.n += int64(len(b))
	if !p.off && time.Since(p.last) > 200*time.Millisecond {
		p.last, p.shown = time.Now(), true
		fmt.Fprintf(p.w, "\r%s: %d of %d MiB (%d%%)", p.what, p.n>>20, p.size>>20, p.n*100/max(p.size, 1))
	}
	return len(b), nil
}

func (p *progress) done() {
	if p.shown {
		fmt.Fprintf(p.w, "\r%s: %d MiB\n", p.what, p.n>>20)
	}
}

// runLsFiles lists a workspace directory (:PATH), a page at a time: type,
// mode, size, time and name, the name's control characters escaped.
func (cf clientFlags) runLsFiles(ctx context.Context, p string, stdout io.Writer) error {
	if !strings.HasSuffix(p, "/") {
		p += "/"
	}
	for after := ""; ; {
		q := url.Values{}
		if after != "" {
			q.Set("after", after)
		}
		resp, err := cf.filesDo(ctx, http.MethodGet, p, q, nil, 0)
		if err != nil {
			return err
		}
		var page struct {
			Entries []struct {
				Name, Raw, Type, Mode, MTime, Target string
				Size                                 int64
			}
			Next string
		}
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil {
			return fmt.Errorf("ls: the gateway's answer: %w", err)
		}
		for _, e := range page.Entries {
			name := e.Name
			if raw, err := base64.StdEncoding.DecodeString(e.Raw); err == nil && e.Raw != "" {
				name = string(raw)
			}
			line := fmt.Sprintf("%-7s %s %12d %s %s", e.Type, e.Mode, e.Size, e.MTime, strconv.Quote(name)[1:len(strconv.Quote(name))-1])
			if e.Target != "" {
				line += " -> " + strconv.Quote(e.Target)
			}
			fmt.Fprintln(stdout, line)
		}
		if page.Next == "" {
			return nil
		}
		after = page.Next
	}
}
