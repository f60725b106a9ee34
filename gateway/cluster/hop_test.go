package cluster

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

var (
	secretA = bytes.Repeat([]byte("a"), 32)
	secretB = bytes.Repeat([]byte("b"), 32)
)

// at returns a Signer for self whose clock reads now.
func at(t *testing.T, self string, now time.Time, secrets ...[]byte) *Signer {
	t.Helper()
	s, err := NewSigner(self, secrets...)
	if err != nil {
		t.Fatal(err)
	}
	s.now = func() time.Time { return now }
	return s
}

func TestNewSigner(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		self    string
		secrets [][]byte
		want    string
	}{
		{"n0", nil, "no node secret"},
		{"n0", [][]byte{secretA[:31]}, "31 bytes, need at least 32"},
		{"n0", [][]byte{secretA, nil}, "node secret 2: 0 bytes"},
		{"N0", [][]byte{secretA}, "RFC 1123"},
		{"", [][]byte{secretA}, "RFC 1123"},
	} {
		if _, err := NewSigner(tc.self, tc.secrets...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewSigner(%q, %d secrets) = %v, want %q", tc.self, len(tc.secrets), err, tc.want)
		}
	}
}

func TestSignRefuses(t *testing.T) {
	t.Parallel()
	s := at(t, "n0", time.Unix(1767225600, 0), secretA)
	for _, tc := range []struct{ to, op, addr string }{
		{"N1", OpLocal, ""}, {"n1", "steal", ""}, {"n1", OpLocal, "1.2.3.4:5;op=list"}, {"n1", OpLocal, "a=b"}, {"n1", OpLocal, "x\ny"},
	} {
		if err := s.Sign(http.Header{}, "GET", "/", tc.to, tc.op, tc.addr); err == nil {
			t.Errorf("Sign(to %q, op %q, addr %q) signed", tc.to, tc.op, tc.addr)
		}
	}
}

// TestVerify: a hop verifies only unchanged, within the window, addressed
// to its receiver and signed with one of its secrets.
func TestVerify(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1767225600, 0)
	const uri = "/v1/executions/n1.abcdef~k?after=3&wait=10s"
	for _, tc := range []struct {
		name   string
		signer *Signer               // the sender
		to     string                // Sign's to
		tamper func(r *http.Request) // after signing
		recv   *Signer               // the receiver
		want   error                 // nil: verifies
	}{
		{"valid", at(t, "n0", t0, secretA), "n1", nil, at(t, "n1", t0, secretA), nil},
		{"at the window's edge", at(t, "n0", t0, secretA), "n1", nil, at(t, "n1", t0.Add(HopWindow), secretA), nil},
		{"early clock at the edge", at(t, "n0", t0, secretA), "n1", nil, at(t, "n1", t0.Add(-HopWindow), secretA), nil},
		{"replayed after the window", at(t, "n0", t0, secretA), "n1", nil, at(t, "n1", t0.Add(HopWindow+time.Second), secretA), ErrBadHop},
		{"from the future", at(t, "n0", t0, secretA), "n1", nil, at(t, "n1", t0.Add(-HopWindow-time.Second), secretA), ErrBadHop},
		{"forged: another secret", at(t, "n0", t0, secretB), "n1", nil, at(t, "n1", t0, secretA), ErrBadHop},
		{"to another node", at(t, "n0", t0, secretA), "n2", nil, at(t, "n1", t0, secretA), ErrBadHop},
		{"tampered URI", at(t, "n0", t0, secretA), "n1", func(r *http.Request) { r.RequestURI = strings.Replace(r.RequestURI, "after=3", "after=0", 1) }, at(t, "n1", t0, secretA), ErrBadHop},
		{"tampered method", at(t, "n0", t0, secretA), "n1", func(r *http.Request) { r.Method = "DELETE" }, at(t, "n1", t0, secretA), ErrBadHop},
		{"tampered addr", at(t, "n0", t0, secretA), "n1", replaceHop("addr=203.0.113.9:5123", "addr=10.0.0.1:1"), at(t, "n1", t0, secretA), ErrBadHop},
		{"tampered op", at(t, "n0", t0, secretA), "n1", replaceHop("op=local", "op=list"), at(t, "n1", t0, secretA), ErrBadHop},
		{"tampered from", at(t, "n0", t0, secretA), "n1", replaceHop("from=n0", "from=n2"), at(t, "n1", t0, secretA), ErrBadHop},
		{"tampered time", at(t, "n0", t0, secretA), "n1", replaceHop("t=1767225600", "t=1767225601"), at(t, "n1", t0, secretA), ErrBadHop},
		{"rotation: old secret still verifies", at(t, "n0", t0, secretA), "n1", nil, at(t, "n1", t0, secretB, secretA), nil},
		{"rotation: new secret verifies", at(t, "n0", t0, secretB, secretA), "n1", nil, at(t, "n1", t0, secretB, secretA), nil},
		{"rotation done: old secret refused", at(t, "n0", t0, secretA), "n1", nil, at(t, "n1", t0, secretB), ErrBadHop},
		{"absent", at(t, "n0", t0, secretA), "n1", func(r *http.Request) { r.Header.Del(HopHeader) }, at(t, "n1", t0, secretA), ErrNoHop},
		{"twice", at(t, "n0", t0, secretA), "n1", func(r *http.Request) { r.Header.Add(HopHeader, r.Header.Get(HopHeader)) }, at(t, "n1", t0, secretA), ErrBadHop},
		{"unknown field", at(t, "n0", t0, secretA), "n1", replaceHop("v=1;", "v=1;x=y;"), at(t, "n1", t0, secretA), ErrBadHop},
		{"version 2", at(t, "n0", t0, secretA), "n1", replaceHop("v=1;", "v=2;"), at(t, "n1", t0, secretA), ErrBadHop},
		{"truncated signature", at(t, "n0", t0, secretA), "n1", func(r *http.Request) { v := r.Header.Get(HopHeader); r.Header.Set(HopHeader, v[:len(v)-2]) }, at(t, "n1", t0, secretA), ErrBadHop},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest("GET", uri, nil)
			if err := tc.signer.Sign(r.Header, r.Method, r.RequestURI, tc.to, OpLocal, "203.0.113.9:5123"); err != nil {
				t.Fatal(err)
			}
			if tc.tamper != nil {
				tc.tamper(r)
			}
			hop, err := tc.recv.Verify(r)
			if tc.want == nil {
				want := Hop{From: "n0", To: "n1", Op: OpLocal, Addr: "203.0.113.9:5123", Time: t0}
				if err != nil || hop != want {
					t.Fatalf("Verify = %+v, %v; want %+v", hop, err, want)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("Verify = %+v, %v; want %v", hop, err, tc.want)
			}
		})
	}
}

// replaceHop returns a tamper that edits the hop header's text.
func replaceHop(old, new string) func(r *http.Request) {
	return func(r *http.Request) {
		r.Header.Set(HopHeader, strings.Replace(r.Header.Get(HopHeader), old, new, 1))
	}
}

// TestVerifyOverHTTP: what a node signs with SignRequest is what the
// receiving server's request shows, query and escapes included.
func TestVerifyOverHTTP(t *testing.T) {
	t.Parallel()
	now := time.Now()
	front, owner := at(t, "n0", now, secretA), at(t, "n1", now, secretA)
	got := make(chan error, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := owner.Verify(r)
		got <- err
	}))
	defer srv.Close()
	req, err := http.NewRequestWithContext(t.Context(), "POST", srv.URL+"/v1/executions/n1.abcdef~a%20b:c?wait=1s&x=%2F", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	if err := front.SignRequest(req, "n1", OpProbe, "127.0.0.1:4000"); err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := <-got; err != nil {
		t.Fatalf("Verify at the server: %v", err)
	}
}

// FuzzVerify: any header value is refused with ErrBadHop (a valid
// signature cannot be guessed), never a panic.
func FuzzVerify(f *testing.F) {
	t0 := time.Unix(1767225600, 0)
	s, _ := NewSigner("n0", secretA)
	s.now = func() time.Time { return t0 }
	h := http.Header{}
	s.Sign(h, "GET", "/", "n1", OpLocal, "1.2.3.4:5")
	f.Add(h.Get(HopHeader))
	f.Add("v=1;from=n0;to=n1;op=local;t=1;addr=;sig=")
	f.Add(";;==;")
	recv, _ := NewSigner("n1", secretB)
	recv.now = s.now
	f.Fuzz(func(t *testing.T, v string) {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set(HopHeader, v)
		if _, err := recv.Verify(r); !errors.Is(err, ErrBadHop) {
			t.Fatalf("Verify(%q) = %v, want ErrBadHop", v, err)
		}
	})
}
