package gateway

import (
	"errors"
	"net/http"

	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/sandbox"
	"github.com/termgate/termgate/session"
)

// The error-code table: the gateway is the one place that maps errors to
// the protocol's stable codes (wire.Code*) and those to HTTP statuses.
// session and sandbox name their sentinel errors; they cannot import
// gateway/wire.

// sentinelCodes is the stable code of each sentinel error of the
// supervisor and the sandbox, tried in this order (errorCode).
var sentinelCodes = []struct {
	err  error
	code string
}{
	{session.ErrNotFound, wire.CodeNotFound}, {session.ErrGone, wire.CodeGone},
	{session.ErrConflict, wire.CodeConflict}, {session.ErrNetworkFixed, wire.CodeConflict}, {session.ErrCapacity, wire.CodeCapacity},
	{session.ErrInvalidID, wire.CodeInvalidID}, {session.ErrInvalidSpec, wire.CodeInvalidSpec},
	{sandbox.ErrInvalidPolicy, wire.CodeInvalidSpec}, {sandbox.ErrUnenforceable, wire.CodeUnenforceable},
	{session.ErrNotRunning, wire.CodeNotRunning}, {session.ErrInputOffset, wire.CodeInputOffset},
	{session.ErrInputFull, wire.CodeInputFull}, {session.ErrNotPTY, wire.CodeNotPTY},
	{session.ErrNoPipes, wire.CodeNoPipes}, {session.ErrSignal, wire.CodeSignalNotAllowed},
	{session.ErrClosed, wire.CodeClosed}, {session.ErrAfter, wire.CodeInvalidAfter},
	{session.ErrAck, wire.CodeInvalidRequest},
	{session.ErrPortRefused, wire.CodeRefused}, {session.ErrHostPorts, wire.CodeForbidden},
	{session.ErrInvalidPort, wire.CodeInvalidRequest},
}

// errorCode is the stable, client-visible code of err: gone for
// session.ErrGone whatever else it wraps, capacity for running out of
// file descriptors, the code of the first sentinel it wraps, or internal
// for anything else.
func errorCode(err error) string {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		return ae.code
	case errors.Is(err, session.ErrGone):
		return wire.CodeGone
	case session.OutOfDescriptors(err):
		return wire.CodeCapacity
	}
	for _, c := range sentinelCodes {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	return wire.CodeInternal
}

// apiStatus is the HTTP status of each stable error code; a code not
// listed is a 500.
var apiStatus = map[string]int{
	wire.CodeBadRequest: http.StatusBadRequest, wire.CodeInvalidID: http.StatusBadRequest,
	wire.CodeInvalidSpec: http.StatusBadRequest, wire.CodeInputOffset: http.StatusBadRequest,
	wire.CodeNotPTY: http.StatusBadRequest, wire.CodeNoPipes: http.StatusBadRequest,
	wire.CodeSignalNotAllowed: http.StatusBadRequest, wire.CodeUnenforceable: http.StatusUnprocessableEntity,
	wire.CodeInvalidAfter: http.StatusBadRequest, wire.CodeInvalidRequest: http.StatusBadRequest,
	wire.CodeUnauthorized: http.StatusUnauthorized, wire.CodeForbidden: http.StatusForbidden,
	wire.CodeNotFound: http.StatusNotFound, wire.CodeGone: http.StatusGone, wire.CodeConflict: http.StatusConflict, wire.CodeNotRunning: http.StatusConflict,
	wire.CodeTooLarge: http.StatusRequestEntityTooLarge, wire.CodeCapacity: http.StatusTooManyRequests,
	wire.CodeInputFull: http.StatusTooManyRequests, wire.CodeRateLimited: http.StatusTooManyRequests,
	wire.CodeTooManyConnections: http.StatusTooManyRequests, wire.CodeRequestTimeout: http.StatusRequestTimeout,
	wire.CodeClosed: http.StatusServiceUnavailable, wire.CodeUnavailable: http.StatusServiceUnavailable,
	wire.CodeRefused: http.StatusBadGateway, wire.CodeTooManyStreams: http.StatusTooManyRequests,
	wire.CodeInsufficientStorage: http.StatusInsufficientStorage, wire.CodePreconditionFailed: http.StatusPreconditionFailed,
}

// apiError is an error the API answers as it is: a stable code and a
// message safe to show.
type apiError struct {
	code, msg string
}

func (e *apiError) Error() string { return e.code + ": " + e.msg }
