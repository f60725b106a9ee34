package gateway

import (
	"bytes"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	verrors "github.com/pb33f/libopenapi-validator/errors"
)

// apiValidator is the validator of openapi.json, made once.
var apiValidator = sync.OnceValues(func() (validator.Validator, error) {
	doc, err := libopenapi.NewDocument(openAPI)
	if err != nil {
		return nil, err
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		return nil, fmt.Errorf("openapi.json: %v", errs)
	}
	return v, nil
})

// TestOpenAPIDocumentIsValid: openapi.json is a valid OpenAPI 3.1
// document, and the server serves it.
func TestOpenAPIDocumentIsValid(t *testing.T) {
	t.Parallel()
	v, err := apiValidator()
	if err != nil {
		t.Fatal(err)
	}
	if ok, errs := v.ValidateDocument(); !ok {
		t.Fatalf("openapi.json is not valid: %s", describe(errs))
	}
	e := newAPIEnv(t, nil)
	status, h, b := e.call(t, http.MethodGet, "/v1/openapi.json", "", nil)
	if status != http.StatusOK || h.Get("Content-Type") != "application/json" || !bytes.Equal(b, openAPI) {
		t.Fatalf("GET /v1/openapi.json: %d %s", status, h.Get("Content-Type"))
	}
}

// TestContractCatchesADrift shows the contract check failing an answer
// the document does not allow: a field it does not know.
func TestContractCatchesADrift(t *testing.T) {
	t.Parallel()
	req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1/v1/executions/x", nil)
	req.Header.Set("Authorization", "Bearer x")
	resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(`{"id": "x", "status": "running", "pty": false, "started": "2026-01-02T03:04:05Z", "first_seq": 1, "last_seq": 1, "input_offset": 0, "incarnation": "i", "surprise": 1}`))}
	if msg := checkContract(req, nil, resp); !strings.Contains(msg, "answer") || !strings.Contains(msg, "surprise") {
		t.Fatalf("an undocumented field passed: %q", msg)
	}
}

// contract is a transport that checks each exchange of the HTTP API
// against openapi.json: every JSON answer, and every request the server
// accepted (a refused one may be malformed on purpose). What disagrees is
// reported by the test that made it, when it ends.
type contract struct {
	next http.RoundTripper
	mu   sync.Mutex
	bad  []string
}

// newContract returns a contract check over next that fails t at its
// end with what disagreed.
func newContract(t testing.TB, next http.RoundTripper) *contract {
	c := &contract{next: next}
	t.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, b := range c.bad {
			t.Errorf("not as openapi.json says: %s", b)
		}
	})
	return c
}

func (c *contract) RoundTrip(r *http.Request) (*http.Response, error) {
	if !documented(r.URL.Path) {
		return c.next.RoundTrip(r)
	}
	var body []byte
	if r.Body != nil && isJSON(r.Header.Get("Content-Type")) {
		body, _ = io.ReadAll(r.Body)
		r.Body.Close()
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	resp, err := c.next.RoundTrip(r)
	if err != nil || !isJSON(resp.Header.Get("Content-Type")) {
		return resp, err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(b))
	check := *resp
	check.Body = io.NopCloser(bytes.NewReader(b))
	var req *http.Request
	if body != nil || r.Body == nil || r.ContentLength == 0 {
		req = r.Clone(r.Context())
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	if msg := checkContract(req, r, &check); msg != "" {
		c.mu.Lock()
		c.bad = append(c.bad, msg)
		c.mu.Unlock()
	}
	return resp, nil
}

// checkContract checks resp (and req, when the server accepted it and
// its body is known) against the document; orig is the request as sent
// when req is nil.
func checkContract(req, orig *http.Request, resp *http.Response) string {
	v, err := apiValidator()
	if err != nil {
		return err.Error()
	}
	if orig == nil {
		orig = req
	}
	where := fmt.Sprintf("%s %s -> %d", orig.Method, orig.URL.Path, resp.StatusCode)
	orig = asDocumented(orig)
	if req != nil {
		req = asDocumented(req)
	}
	if req != nil && resp.StatusCode/100 == 2 {
		if ok, errs := v.ValidateHttpRequest(req); !ok {
			return where + ": request: " + describe(errs)
		}
	}
	if ok, errs := v.ValidateHttpResponse(orig, resp); !ok {
		return where + ": answer: " + describe(errs)
	}
	return ""
}

// filesPath splits a files route into its prefix and the path in the
// workspace.
var filesPath = regexp.MustCompile(`^(/v1/files/|/v1/executions/[^/]+/files/)(.*)$`)

// asDocumented is r with the workspace path of a files route as one
// segment (its slashes escaped, "/" for the root), which is how the
// document can describe it: an OpenAPI path parameter holds no slash.
func asDocumented(r *http.Request) *http.Request {
	m := filesPath.FindStringSubmatch(r.URL.Path)
	if m == nil {
		return r
	}
	rest := m[2]
	if rest == "" {
		rest = "/"
	}
	r = r.Clone(r.Context())
	r.URL.Path = m[1] + url.PathEscape(rest)
	r.URL.RawPath = ""
	return r
}

// documented says whether openapi.json describes path.
func documented(path string) bool {
	return path == "/v1/exec" || path == "/v1/openapi.json" || strings.HasPrefix(path, "/v1/executions") || strings.HasPrefix(path, "/v1/files/")
}

func isJSON(ct string) bool {
	mt, _, _ := mime.ParseMediaType(ct)
	return mt == "application/json"
}

func describe(errs []*verrors.ValidationError) string {
	var b strings.Builder
	for _, e := range errs {
		fmt.Fprintf(&b, "%s (%s)", e.Message, e.Reason)
		for _, s := range e.SchemaValidationErrors {
			fmt.Fprintf(&b, "; %s at %s", s.Reason, s.FieldPath)
		}
		b.WriteString(". ")
	}
	return b.String()
}
