package auth

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/time/rate"
)

// JWKSConfig bounds and paces the fetches of Config.JWKSURLs. Zero values
// mean defaults.
type JWKSConfig struct {
	// RefreshInterval is how often each JWKS is fetched again (default
	// 15m): a key the provider removed is refused after at most this.
	RefreshInterval time.Duration
	// UnknownKIDInterval spaces the refreshes a token with an unknown kid
	// makes, per JWKS: at most one per interval (default 5m), so tokens
	// with made-up kids cannot make termgate hammer the provider.
	UnknownKIDInterval time.Duration
	// Timeout bounds each fetch, connection to body (default 10s).
	Timeout time.Duration
	// MaxKeys bounds the keys kept per JWKS (default 100): a larger set is
	// refused and the keys held stay.
	MaxKeys int
	// MaxBytes bounds a JWKS response (default 1 MiB): a larger one is
	// refused and the keys held stay.
	MaxBytes int64
}

// JWKS defaults.
const (
	DefaultJWKSRefreshInterval    = 15 * time.Minute
	DefaultJWKSUnknownKIDInterval = 5 * time.Minute
	DefaultJWKSTimeout            = 10 * time.Second
	DefaultJWKSMaxKeys            = 100
	DefaultJWKSMaxBytes           = 1 << 20
)

// maxFirstFetchBackoff bounds the wait between two failed first fetches.
const maxFirstFetchBackoff = time.Minute

// jwksSlowWarning is how long a first fetch may take before it is
// logged as not answering (at most the fetch timeout, after which the
// failure is logged anyway).
const jwksSlowWarning = 2 * time.Second

func (c JWKSConfig) withDefaults() (JWKSConfig, error) {
	if c.RefreshInterval < 0 || c.UnknownKIDInterval < 0 || c.Timeout < 0 || c.MaxKeys < 0 || c.MaxBytes < 0 {
		return c, errors.New("auth: auth config: negative JWKS interval, timeout or bound")
	}
	if c.RefreshInterval == 0 {
		c.RefreshInterval = DefaultJWKSRefreshInterval
	}
	if c.UnknownKIDInterval == 0 {
		c.UnknownKIDInterval = DefaultJWKSUnknownKIDInterval
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultJWKSTimeout
	}
	if c.MaxKeys == 0 {
		c.MaxKeys = DefaultJWKSMaxKeys
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = DefaultJWKSMaxBytes
	}
	return c, nil
}

// ErrJWKSURL is wrapped by the refusal of a JWKS URL that is neither
// https nor http to a loopback address: keys fetched in clear text can be
// replaced on the way.
var ErrJWKSURL = errors.New("auth: JWKS URL must be https (http only to 127.0.0.0/8 or ::1)")

// CheckJWKSURL refuses what ErrJWKSURL says; New checks every JWKS URL
// with it.
func CheckJWKSURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("auth: JWKS URL %q: %w", raw, err)
	}
	return checkJWKSLocation(u)
}

func checkJWKSLocation(u *url.URL) error {
	switch {
	case u.Host == "":
		return fmt.Errorf("%w: %s has no host", ErrJWKSURL, u.Redacted())
	case u.Scheme == "https":
		return nil
	case u.Scheme == "http":
		if ip := net.ParseIP(u.Hostname()); ip != nil && ip.IsLoopback() {
			return nil
		}
	}
	return fmt.Errorf("%w: %s", ErrJWKSURL, u.Redacted())
}

// jwksSource is one JWKS URL: its keyfunc once the first fetch succeeded.
type jwksSource struct {
	url     string
	keyfunc atomic.Pointer[keyfunc.Keyfunc] // nil until fetched once
	held    atomic.Pointer[boundedStorage]  // its keys, set with keyfunc
}

// errNoSuchKey: this JWKS has no key of the token's kid (or no keys yet).
var errNoSuchKey = errors.New("no such key")

// key returns the JWKS key of t's kid, checked as a file's key is: RSA of
// at least 2048 bits, P-256 or Ed25519, never a symmetric key (which a
// token could otherwise choose to have its signature checked with).
func (s *jwksSource) key(ctx context.Context, t *jwt.Token) (authKey, error) {
	kf := s.keyfunc.Load()
	if kf == nil {
		return authKey{}, errNoSuchKey
	}
	kid, _ := t.Header["kid"].(string)
	_, err := s.held.Load().KeyRead(ctx, kid)
	known := err == nil
	// For a kid not held, the keyfunc refreshes the set first, unless the
	// limiter refuses: then, as when the refresh lacks it too, the kid is
	// unknown here.
	raw, err := (*kf).KeyfuncCtx(ctx)(t)
	if errors.Is(err, jwkset.ErrKeyNotFound) || (err != nil && !known) {
		return authKey{}, errNoSuchKey
	}
	if err != nil {
		return authKey{}, fmt.Errorf("JWKS %s: %w", s.url, err)
	}
	k, err := newPublicAuthKey(raw)
	if err != nil {
		return authKey{}, fmt.Errorf("JWKS %s: key %v: %w", s.url, t.Header["kid"], err)
	}
	return k, nil
}

// startJWKS starts one first-fetch loop per JWKS URL.
func (a *Authenticator) startJWKS() {
	a.ctx, a.stop = context.WithCancel(context.Background())
	a.client = newJWKSClient(a.cfg.JWKS)
	for _, u := range a.cfg.JWKSURLs {
		s := &jwksSource{url: u}
		a.jwks = append(a.jwks, s)
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			a.fetchFirst(s)
		}()
	}
}

// fetchFirst fetches s until it succeeds (waiting from 1s, doubling, to
// at most a minute or the refresh interval between tries) or Close; then
// the library refreshes it every RefreshInterval and on unknown kids.
func (a *Authenticator) fetchFirst(s *jwksSource) {
	wait := time.Second
	// A provider that takes connections and never answers fails only
	// after the fetch timeout: say so sooner, once.
	slow := time.AfterFunc(min(jwksSlowWarning, a.cfg.JWKS.Timeout), func() {
		a.log.Warn("JWKS has not answered yet: tokens of its keys are refused until it does; the other key sources work, and readiness needs only one",
			"url", s.url)
	})
	defer slow.Stop()
	for {
		attempt, cancel := context.WithCancel(a.ctx)
		kf, held, err := a.openJWKS(attempt, s.url)
		slow.Stop()
		if err == nil {
			s.held.Store(held)
			s.keyfunc.Store(&kf)
			held.inUse()
			<-a.ctx.Done() // attempt carries the library's refreshes
			cancel()
			return
		}
		cancel()
		a.log.Warn("JWKS not fetched: tokens of its keys are refused until it is", "url", s.url, "err", err, "retry_in", wait.Seconds())
		select {
		case <-a.ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, maxFirstFetchBackoff, max(a.cfg.JWKS.RefreshInterval, time.Second))
	}
}

// openJWKS fetches u once and returns its keyfunc, which refreshes it
// until ctx ends.
func (a *Authenticator) openJWKS(ctx context.Context, u string) (keyfunc.Keyfunc, *boundedStorage, error) {
	cfg := a.cfg.JWKS
	store := &boundedStorage{MemoryJWKSet: jwkset.NewMemoryStorage(), url: u, max: cfg.MaxKeys, log: a.log}
	httpStore, err := jwkset.NewStorageFromHTTP(u, jwkset.HTTPClientStorageOptions{
		Client: a.client, Ctx: ctx, HTTPTimeout: cfg.Timeout, RefreshInterval: cfg.RefreshInterval,
		Storage: store,
		RefreshErrorHandler: func(ctx context.Context, err error) {
			a.log.Warn("JWKS refresh failed: its keys held stay in use", "url", u, "err", err)
		},
	})
	if err != nil {
		return nil, nil, err
	}
	client, err := jwkset.NewHTTPClient(jwkset.HTTPClientOptions{
		HTTPURLs: map[string]jwkset.Storage{u: httpStore},
		// The wait bounds the refresh too: the library fetches with the
		// same context. A token finding no token in the limiter is
		// refused at once: its wait would exceed this.
		RateLimitWaitMax:  cfg.Timeout,
		RefreshUnknownKID: rate.NewLimiter(rate.Every(cfg.UnknownKIDInterval), 1),
	})
	if err != nil {
		return nil, nil, err
	}
	kf, err := keyfunc.New(keyfunc.Options{Ctx: ctx, Storage: client, UseWhitelist: []jwkset.USE{jwkset.UseSig, ""}})
	return kf, store, err
}

// boundedStorage holds one JWKS's keys and refuses a set of more than max,
// so that the keys held stay; once in use, it logs the kids when they
// change, so that the line means their tokens are accepted.
type boundedStorage struct {
	*jwkset.MemoryJWKSet
	url string
	max int
	log *slog.Logger

	mu   sync.Mutex
	kids []string
	live bool // inUse was called: tokens are checked against kids
}

// inUse logs the kids held, once tokens are checked against them.
func (b *boundedStorage) inUse() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.live = true
	b.log.Info("JWKS keys", "url", b.url, "kids", b.kids)
}

// KeyReplaceAll implements jwkset.Storage: each fetch replaces the set.
func (b *boundedStorage) KeyReplaceAll(ctx context.Context, given []jwkset.JWK) error {
	if len(given) > b.max {
		return fmt.Errorf("auth: JWKS %s: %d keys, more than %d", b.url, len(given), b.max)
	}
	if err := b.MemoryJWKSet.KeyReplaceAll(ctx, given); err != nil {
		return err
	}
	kids := make([]string, 0, len(given))
	for _, k := range given {
		kids = append(kids, k.Marshal().KID)
	}
	slices.Sort(kids)
	b.mu.Lock()
	defer b.mu.Unlock()
	if !slices.Equal(kids, b.kids) {
		b.kids = kids
		if b.live {
			b.log.Info("JWKS keys", "url", b.url, "kids", kids)
		}
	}
	return nil
}

// newJWKSClient is the HTTP client of JWKS fetches: bounded in time and
// size, following redirects only to locations a JWKS URL may have.
func newJWKSClient(cfg JWKSConfig) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSHandshakeTimeout, tr.ResponseHeaderTimeout = cfg.Timeout, cfg.Timeout
	return &http.Client{
		Timeout:   cfg.Timeout,
		Transport: limitedTransport{tr, cfg.MaxBytes},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) > 3 {
				return errors.New("auth: JWKS: more than 3 redirects")
			}
			return checkJWKSLocation(req.URL)
		},
	}
}

// limitedTransport refuses a response body larger than max bytes.
type limitedTransport struct {
	*http.Transport
	max int64
}

// RoundTrip implements http.RoundTripper.
func (l limitedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := l.Transport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if resp.ContentLength > l.max {
		resp.Body.Close()
		return nil, fmt.Errorf("auth: JWKS %s: response of %d bytes, larger than %d bytes", req.URL.Redacted(), resp.ContentLength, l.max)
	}
	resp.Body = &limitedBody{ReadCloser: resp.Body, left: l.max, max: l.max, url: req.URL.Redacted()}
	return resp, nil
}

// limitedBody fails a read past its bound instead of cutting the body
// short: a cut JWKS could parse as a smaller, wrong set.
type limitedBody struct {
	io.ReadCloser
	left, max int64
	url       string
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		return 0, fmt.Errorf("auth: JWKS %s: response larger than %d bytes", b.url, b.max)
	}
	return n, err
}
