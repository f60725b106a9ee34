package gateway

// The HTTP API offers the WebSocket protocol's start, state, events,
// input and cancel as plain requests, for callers that cannot hold a
// connection open (coding agents, scripts). PROTOCOL.md, "HTTP API", is
// its contract. It authenticates, scopes by tenant and names errors
// exactly as the WebSocket endpoint does.

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/termgate/termgate/gateway/auth"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/session"
)

// Bounds of the events long poll.
const (
	apiMaxWait         = 60 * time.Second
	apiMaxPollDataSize = 1 << 20 // output bytes in one events response (at least one event)
)

// errUnauthorized is the whole answer to any refused token: which check
// failed goes to the log only.
var errUnauthorized = &apiError{wire.CodeUnauthorized, "a valid bearer token is required"}

func badRequest(msg string) error { return &apiError{wire.CodeBadRequest, msg} }

// errStartRate and errAgentInputRate answer a subject over its start or
// input rate (an agent exec's input: sent again with the same offset).
var (
	errStartRate      = &apiError{wire.CodeRateLimited, "too many starts; slow down"}
	errAgentInputRate = &apiError{wire.CodeRateLimited, "too many input requests; resend with the same offset"}
)

// httpAPI serves the HTTP API. Its rate limits are the server's, per
// (tenant, subject), shared with the WebSocket connections.
type httpAPI struct {
	s *Server
}

// apiHandler serves one authorised request; an error it returns becomes
// the JSON error answer.
type apiHandler func(w http.ResponseWriter, r *http.Request, c auth.Claims) error

// authorize verifies the Authorization: Bearer token, the only place the
// API takes one from: no subprotocol, no query parameter.
func (a *httpAPI) authorize(r *http.Request, scope string) (auth.Claims, error) {
	scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	if !strings.EqualFold(scheme, "Bearer") {
		a.s.metrics.authFailed("", nil)
		a.auditAuthFailed(r, "", nil)
		return auth.Claims{}, errUnauthorized
	}
	c, err := a.s.cfg.Auth.Verify(strings.TrimSpace(token))
	if err != nil {
		a.s.metrics.authFailed(token, err)
		a.auditAuthFailed(r, token, err)
		a.s.log.Info("api request refused", "remote_addr", a.s.remoteAddr(r), "err", err)
		return auth.Claims{}, errUnauthorized
	}
	if !c.Has(scope) {
		a.s.metrics.authFailures.add(authScope, 1)
		return c, &apiError{wire.CodeForbidden, "the token lacks the " + scope + " scope"}
	}
	return c, nil
}

// fail answers err with its status, stable code and safe message.
// Anything without a code is logged and answered "internal error".
func (a *httpAPI) fail(w http.ResponseWriter, r *http.Request, c auth.Claims, err error) {
	var ae *apiError
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &ae):
	case errors.As(err, &tooLarge):
		a.s.metrics.refuse(refusedMessageSize)
		ae = &apiError{wire.CodeTooLarge, "the request body exceeds " + strconv.FormatInt(tooLarge.Limit, 10) + " bytes"}
	case r.Context().Err() != nil:
		return // the client left; nobody reads an answer
	case session.OutOfDescriptors(err):
		a.s.log.Warn("api request refused: out of file descriptors", "route", r.Pattern, "tenant", c.Tenant, "err", err)
		ae = &apiError{wire.CodeCapacity, outOfDescriptorsText}
	case errorCode(err) != wire.CodeInternal:
		ae = &apiError{errorCode(err), err.Error()}
	default:
		a.s.log.Error("api request failed", "route", r.Pattern, "tenant", c.Tenant, "execution", r.PathValue("id"), "err", err)
		ae = &apiError{wire.CodeInternal, "internal error"}
	}
	a.auditRefusal(r, c, ae.code)
	status, ok := apiStatus[ae.code]
	if !ok {
		status = http.StatusInternalServerError
	}
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="termgate"`)
	}
	if status == http.StatusServiceUnavailable {
		a.s.retryAfter(w)
	}
	a.respond(w, status, apiErrorBody{Error: ae.code, Message: ae.msg})
}

type apiErrorBody struct {
	Error   string `json:"error"`
	Message string `json:"message"`
}

// respond writes v as the JSON answer. Answers describe live state, so
// nothing may cache them.
func (a *httpAPI) respond(w http.ResponseWriter, status int, v any) {
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	if err := json.NewEncoder(w).Encode(v); err != nil {
		a.s.log.Debug("api answer not delivered", "err", err)
	}
}

// errBodyTimeout answers a request whose body did not arrive in time.
var errBodyTimeout = &apiError{wire.CodeRequestTimeout, "the request body did not arrive in time"}

// decodeBody reads one JSON object of at most limit bytes into dst within
// the server's RequestReadTimeout; unknown fields are refused so that
// typos do not pass silently.
func (a *httpAPI) decodeBody(w http.ResponseWriter, r *http.Request, limit int64, dst any) error {
	return a.readWithin(w, func() error { return decodeJSON(w, r, limit, dst) })
}

// readWithin runs read, which reads the request's body, within the
// server's RequestReadTimeout; a body that does not come in time is
// errBodyTimeout.
func (a *httpAPI) readWithin(w http.ResponseWriter, read func() error) error {
	// The deadline is the connection's: it is lifted once the body is
	// read, or it would end the next request on a kept-alive connection.
	rc := http.NewResponseController(w)
	if err := rc.SetReadDeadline(time.Now().Add(a.s.cfg.RequestReadTimeout)); err == nil {
		defer rc.SetReadDeadline(time.Time{})
	}
	err := read()
	if err != nil {
		// Close after answering: otherwise the server would wait for the
		// rest of a body it refused, without a deadline, before answering.
		w.Header().Set("Connection", "close")
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return errBodyTimeout
	}
	return err
}

// decodeJSON reads one JSON object of at most limit bytes into dst.
func decodeJSON(w http.ResponseWriter, r *http.Request, limit int64, dst any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	err := dec.Decode(dst)
	if err == nil {
		if _, err = dec.Token(); err == io.EOF {
			return nil
		} else if err == nil {
			err = errors.New("trailing data after the JSON object")
		}
	}
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return err
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return err
	}
	if errors.Is(err, io.EOF) {
		return badRequest("the request body must be a JSON object")
	}
	return badRequest("malformed request body: " + err.Error())
}

// apiStart is the body of POST /v1/executions: the start request's
// fields that make sense without a connection.
type apiStart struct {
	ID        string            `json:"id"`
	Command   string            `json:"command"`
	Args      []string          `json:"args"`
	Env       map[string]string `json:"env"`
	Cwd       string            `json:"cwd"`
	PTY       *wire.Size        `json:"pty"`
	TimeoutMS int64             `json:"timeout_ms"`
	// IdleTimeoutMS and Interactive are the start request's.
	IdleTimeoutMS int64        `json:"idle_timeout_ms"`
	Interactive   bool         `json:"interactive"`
	Flow          string       `json:"flow"`
	HoldMS        int64        `json:"hold_ms"`
	Limits        *wire.Limits `json:"limits"`
	Record        bool         `json:"record"`
	RecordInput   bool         `json:"record_input"`
	Network       string       `json:"network"`
	// The start options (PROTOCOL.md, "Start options").
	WorkspaceReadOnly bool     `json:"workspace_read_only"`
	Mounts            []string `json:"mounts"`
	Proc              string   `json:"proc"`
	MaxOutputBytes    int      `json:"max_output_bytes"`
	RetentionMS       int64    `json:"retention_ms"`
}

func (b apiStart) request() wire.Request {
	return wire.Request{
		Type: wire.TypeStart, ID: b.ID, Command: b.Command, Args: b.Args, Env: b.Env, Cwd: b.Cwd,
		PTY: b.PTY, TimeoutMS: b.TimeoutMS, IdleTimeoutMS: b.IdleTimeoutMS, Interactive: b.Interactive,
		Limits: b.Limits, Flow: b.Flow, HoldMS: b.HoldMS, Record: b.Record, RecordInput: b.RecordInput,
		Network: b.Network, WorkspaceReadOnly: b.WorkspaceReadOnly, Mounts: b.Mounts, Proc: b.Proc,
		MaxOutputBytes: b.MaxOutputBytes, RetentionMS: b.RetentionMS,
	}
}

// pollQuery parses ?after= (default 0) and ?wait= (a Go duration, default
// 0, at most apiMaxWait).
func pollQuery(q url.Values) (after uint64, wait time.Duration, err error) {
	if s := q.Get("after"); s != "" {
		if after, err = strconv.ParseUint(s, 10, 64); err != nil {
			return 0, 0, badRequest("after must be a sequence number")
		}
	}
	if s := q.Get("wait"); s != "" {
		wait, err = time.ParseDuration(s)
		if err != nil || wait < 0 || wait > apiMaxWait {
			return 0, 0, badRequest("wait must be a duration between 0s and " + apiMaxWait.String() + ", such as 25s")
		}
	}
	return after, wait, nil
}
