package wire

import "slices"

// Error codes: the stable value of Message.Error and of an HTTP API
// error's "error" field. Messages beside them are for people; programs
// branch on these.
const (
	CodeUnauthorized     = "unauthorized"       // no valid token, or it expired
	CodeForbidden        = "forbidden"          // the token lacks the scope
	CodeNotFound         = "not_found"          // unknown, expired, or another tenant's execution
	CodeGone             = "gone"               // the execution existed, but the restarted server no longer has it
	CodeConflict         = "conflict"           // an execution ID reused with another spec
	CodeCapacity         = "capacity"           // the server is full for now; retry later
	CodeInvalidID        = "invalid_id"         // a malformed execution ID
	CodeInvalidSpec      = "invalid_spec"       // a start the server refuses as asked
	CodeUnenforceable    = "unenforceable"      // a ceiling this host cannot enforce
	CodeNotRunning       = "not_running"        // the execution ended (or has not run the command yet)
	CodeNotAttached      = "not_attached"       // no such channel on this connection
	CodeReadOnly         = "read_only"          // the channel was attached read-only
	CodeTooManyChannels  = "too_many_channels"  // the connection holds its limit of channels
	CodeRateLimited      = "rate_limited"       // the subject's start or input rate was exceeded
	CodeInputOffset      = "input_offset"       // input or close-stdin past what was received
	CodeInputFull        = "input_full"         // the execution's input buffer is full
	CodeNotPTY           = "not_pty"            // resize of an execution without a terminal
	CodeNoPipes          = "no_pipes"           // close-stdin of an execution on a terminal
	CodeSignalNotAllowed = "signal_not_allowed" // a signal clients may not send
	CodeClosed           = "closed"             // the server is shutting down
	CodeUnavailable      = "unavailable"        // a node or the audit trail cannot serve it now; retry after retry_ms
	CodeInvalidAfter     = "invalid_after"      // attach after a sequence the execution has not reached
	CodeInvalidRequest   = "invalid_request"    // a request with missing or invalid fields
	CodeUnsupported      = "unsupported"        // a request type this server does not know
	CodeInternal         = "internal"           // details only in the server log
	CodeRefused          = "refused"            // a forward to a port nothing listens on
	CodeTooManyStreams   = "too_many_streams"   // the connection holds its limit of forward streams
)

// Error codes of the HTTP API only.
const (
	CodeBadRequest          = "bad_request"          // malformed JSON, unknown field, bad query parameter
	CodeTooLarge            = "too_large"            // a body over the message size limit
	CodeRequestTimeout      = "request_timeout"      // the body did not arrive in time
	CodeTooManyConnections  = "too_many_connections" // the subject holds its connection budget
	CodePreconditionFailed  = "precondition_failed"  // If-Match or If-None-Match of a write does not hold
	CodeInsufficientStorage = "insufficient_storage" // the workspace had no room for a write; nothing of it was kept
)

// codes lists every code above, in the order PROTOCOL.md names them.
var codes = []string{
	CodeUnauthorized, CodeForbidden, CodeNotFound, CodeGone, CodeConflict, CodeCapacity, CodeInvalidID,
	CodeInvalidSpec, CodeUnenforceable, CodeNotRunning, CodeNotAttached, CodeReadOnly, CodeTooManyChannels,
	CodeRateLimited, CodeInputOffset, CodeInputFull, CodeNotPTY, CodeNoPipes, CodeSignalNotAllowed,
	CodeClosed, CodeUnavailable, CodeInvalidAfter, CodeInvalidRequest, CodeUnsupported, CodeInternal,
	CodeRefused, CodeTooManyStreams, CodeBadRequest, CodeTooLarge, CodeRequestTimeout, CodeTooManyConnections,
	CodePreconditionFailed, CodeInsufficientStorage,
}

// Codes returns every error code the server sends, over WebSocket or HTTP.
func Codes() []string { return slices.Clone(codes) }

// fatal are the codes that, answering a start or an attach, mean the
// execution cannot be followed: retrying the same request on this or a
// new connection would be answered the same way, or must not happen
// unasked (a start refused for capacity is retried by the caller).
var fatal = []string{
	CodeNotFound, CodeGone, CodeForbidden, CodeConflict, CodeInvalidID, CodeInvalidSpec, CodeUnenforceable,
	CodeCapacity, CodeTooManyChannels, CodeUnauthorized,
}

// Fatal reports whether code, answering a start or an attach, ends
// following that execution. Other codes answer one request and leave
// the execution followed.
func Fatal(code string) bool { return slices.Contains(fatal, code) }

// inputRefused are the codes refusing an input frame or close-stdin.
var inputRefused = []string{CodeInputFull, CodeInputOffset, CodeRateLimited, CodeUnavailable}

// InputRefused reports whether code refuses input: the error carries the
// input offset the execution received, and the client resends from there
// after a pause (PROTOCOL.md, "Input").
func InputRefused(code string) bool { return slices.Contains(inputRefused, code) }

// Close codes beyond RFC 6455's, documented in PROTOCOL.md. Untyped, so
// they convert to any WebSocket library's status type.
const (
	CloseAuthExpired      = 4001 // the token expired without a reauth
	CloseProtocolError    = 4002 // a malformed control message or binary frame
	CloseLimit            = 4003 // control messages sent without reading the answers
	CloseHeartbeatTimeout = 4004 // no pong in time
)

// CloseServiceRestart is RFC 6455's 1012: the server is restarting and its
// executions live on; reconnect and resume (PROTOCOL.md, "Restarts").
const CloseServiceRestart = 1012
