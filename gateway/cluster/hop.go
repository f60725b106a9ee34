package cluster

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/termgate/termgate/session/execid"
)

// HopHeader is the header a node adds to a request it forwards to another.
// A load balancer in front of the nodes should strip it from clients'
// requests; a client's hop that does not verify is refused anyway.
const HopHeader = "Termgate-Hop"

// HopWindow is how far a hop's time may be from the receiver's clock.
const HopWindow = 30 * time.Second

// What a hop asks of the node it reaches.
const (
	OpLocal = "local" // serve this request here, as if the client had come directly
	OpList  = "list"  // answer the local list only (a fan-out's leg)
	OpProbe = "probe" // say whether a keyed start's execution exists; never create it
)

// MinSecretBytes is the shortest node secret NewSigner accepts.
const MinSecretBytes = 32

// maxHopHeaderBytes bounds the header Verify parses: a valid one is about
// 200 bytes.
const maxHopHeaderBytes = 512

// Errors of Verify. ErrBadHop wraps the reason, which is for the log only.
var (
	ErrNoHop  = errors.New("cluster: no hop header")
	ErrBadHop = errors.New("cluster: hop header does not verify")
)

// Hop is a verified hop: who forwarded the request, what it asks, and the
// client's address as the forwarding node saw it.
type Hop struct {
	From string    // the forwarding node
	To   string    // this node
	Op   string    // OpLocal, OpList or OpProbe
	Addr string    // the client's address (host:port), possibly empty
	Time time.Time // when it was signed, to the second
}

// Signer signs the hops this node sends and verifies those it receives.
// It is safe for concurrent use.
type Signer struct {
	self    string
	secrets [][]byte
	now     func() time.Time
}

// NewSigner returns the Signer of node self. The first secret signs; every
// secret verifies, so a secret is rotated by a rolling restart with
// (new, old), then (new). Each must be at least MinSecretBytes long.
func NewSigner(self string, secrets ...[]byte) (*Signer, error) {
	if !execid.ValidNode(self) {
		return nil, fmt.Errorf("cluster: node name %q: want an RFC 1123 label (lower-case letters, digits, inner hyphens; at most 63)", self)
	}
	if len(secrets) == 0 {
		return nil, errors.New("cluster: no node secret")
	}
	s := &Signer{self: self, now: time.Now}
	for i, k := range secrets {
		if len(k) < MinSecretBytes {
			return nil, fmt.Errorf("cluster: node secret %d: %d bytes, need at least %d", i+1, len(k), MinSecretBytes)
		}
		s.secrets = append(s.secrets, append([]byte(nil), k...))
	}
	return s, nil
}

// Self returns the name of the node s signs for.
func (s *Signer) Self() string { return s.self }

// Sign sets h's hop header for a request of method and requestURI (the
// path and query as sent, url.URL.RequestURI) to node to, asking op, for a
// client at addr. It refuses a malformed node name, an unknown op and an
// addr holding characters the header cannot carry.
func (s *Signer) Sign(h http.Header, method, requestURI, to, op, addr string) error {
	if !execid.ValidNode(to) {
		return fmt.Errorf("cluster: sign hop: node name %q is not valid", to)
	}
	if !validOp(op) {
		return fmt.Errorf("cluster: sign hop: unknown op %q", op)
	}
	if !validAddr(addr) {
		return fmt.Errorf("cluster: sign hop: client address %q holds characters a hop cannot carry", addr)
	}
	t := strconv.FormatInt(s.now().Unix(), 10)
	sig := mac(s.secrets[0], s.self, to, op, t, method, requestURI, addr)
	h.Set(HopHeader, "v=1;from="+s.self+";to="+to+";op="+op+";t="+t+";addr="+addr+";sig="+base64.RawURLEncoding.EncodeToString(sig))
	return nil
}

// SignRequest signs r with its own method and URL (see Sign).
func (s *Signer) SignRequest(r *http.Request, to, op, addr string) error {
	return s.Sign(r.Header, r.Method, r.URL.RequestURI(), to, op, addr)
}

// Verify checks r's hop header: ErrNoHop when there is none; an error
// wrapping ErrBadHop when it is malformed, signed with no secret of s,
// outside HopWindow, or addressed to another node.
func (s *Signer) Verify(r *http.Request) (Hop, error) {
	values := r.Header.Values(HopHeader)
	switch {
	case len(values) == 0:
		return Hop{}, ErrNoHop
	case len(values) > 1:
		return Hop{}, fmt.Errorf("%w: %d hop headers", ErrBadHop, len(values))
	}
	f, err := parseHop(values[0])
	if err != nil {
		return Hop{}, err
	}
	uri := r.RequestURI
	if uri == "" {
		uri = r.URL.RequestURI()
	}
	want := []byte(f["sig"])
	ok := false
	for _, k := range s.secrets { // every secret, whichever matches
		if hmac.Equal(mac(k, f["from"], f["to"], f["op"], f["t"], r.Method, uri, f["addr"]), want) {
			ok = true
		}
	}
	if !ok {
		return Hop{}, fmt.Errorf("%w: bad signature from %q", ErrBadHop, f["from"])
	}
	if f["to"] != s.self {
		return Hop{}, fmt.Errorf("%w: addressed to %q, this is %q", ErrBadHop, f["to"], s.self)
	}
	unix, _ := strconv.ParseInt(f["t"], 10, 64) // parseHop checked it
	at := time.Unix(unix, 0)
	if d := s.now().Sub(at).Abs(); d > HopWindow {
		return Hop{}, fmt.Errorf("%w: signed %s from now, beyond %s", ErrBadHop, d.Truncate(time.Second), HopWindow)
	}
	return Hop{From: f["from"], To: f["to"], Op: f["op"], Addr: f["addr"], Time: at}, nil
}

// hopFields are the fields of a version 1 hop header, each exactly once.
var hopFields = []string{"v", "from", "to", "op", "t", "addr", "sig"}

// parseHop splits a hop header into its fields and checks their form; the
// "sig" field comes back decoded.
func parseHop(v string) (map[string]string, error) {
	if len(v) > maxHopHeaderBytes {
		return nil, fmt.Errorf("%w: %d bytes, at most %d", ErrBadHop, len(v), maxHopHeaderBytes)
	}
	f := make(map[string]string, len(hopFields))
	for part := range strings.SplitSeq(v, ";") {
		k, val, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("%w: field %q has no value", ErrBadHop, part)
		}
		if _, dup := f[k]; dup {
			return nil, fmt.Errorf("%w: field %q twice", ErrBadHop, k)
		}
		f[k] = val
	}
	for _, k := range hopFields {
		if _, ok := f[k]; !ok {
			return nil, fmt.Errorf("%w: no %q field", ErrBadHop, k)
		}
	}
	if len(f) != len(hopFields) {
		return nil, fmt.Errorf("%w: unknown fields", ErrBadHop)
	}
	if f["v"] != "1" {
		return nil, fmt.Errorf("%w: version %q, want 1", ErrBadHop, f["v"])
	}
	if !execid.ValidNode(f["from"]) || !execid.ValidNode(f["to"]) {
		return nil, fmt.Errorf("%w: bad node name", ErrBadHop)
	}
	if !validOp(f["op"]) {
		return nil, fmt.Errorf("%w: unknown op %q", ErrBadHop, f["op"])
	}
	if t, err := strconv.ParseInt(f["t"], 10, 64); err != nil || t < 0 || strconv.FormatInt(t, 10) != f["t"] {
		return nil, fmt.Errorf("%w: bad time %q", ErrBadHop, f["t"])
	}
	if !validAddr(f["addr"]) {
		return nil, fmt.Errorf("%w: bad address", ErrBadHop)
	}
	sig, err := base64.RawURLEncoding.DecodeString(f["sig"])
	if err != nil || len(sig) != sha256.Size {
		return nil, fmt.Errorf("%w: bad signature encoding", ErrBadHop)
	}
	f["sig"] = string(sig)
	return f, nil
}

// mac is the hop's HMAC-SHA256 over its fields and the request line.
func mac(secret []byte, from, to, op, t, method, requestURI, addr string) []byte {
	h := hmac.New(sha256.New, secret)
	for i, s := range []string{"termgate-hop/1", from, to, op, t, method, requestURI, addr} {
		if i > 0 {
			h.Write([]byte{'\n'})
		}
		h.Write([]byte(s))
	}
	return h.Sum(nil)
}

func validOp(op string) bool { return op == OpLocal || op == OpList || op == OpProbe }

// validAddr accepts what a net address prints as: host:port, with
// brackets, dots, colons, letters, digits and an IPv6 zone's "%", "-", "_".
// It bounds the length and keeps ";", "=" and "\n" out of the header and
// the MAC's input.
func validAddr(a string) bool {
	if len(a) > 128 {
		return false
	}
	for _, c := range []byte(a) {
		switch {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case strings.IndexByte("[]:.%-_", c) >= 0:
		default:
			return false
		}
	}
	return true
}
