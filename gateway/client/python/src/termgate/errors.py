"""Errors: a refusal by the gateway is a TermgateError, or the subclass
named after its code (NotFound for not_found, InputOffset for
input_offset, ...), so that callers catch what they handle."""

from __future__ import annotations

from typing import Dict, Optional, Type



class TermgateError(Exception):
    """A refusal by the gateway: code is one of CODES, message safe to show,
    status the HTTP status (0 over the WebSocket)."""

    code = "internal"

    def __init__(self, code: str, message: str = "", status: int = 0, retry_ms: int = 0, input_offset: Optional[int] = None):
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message
        self.status = status
        self.retry_ms = retry_ms
        self.input_offset = input_offset


class BadRequest(TermgateError):
    """The gateway's bad_request."""

    code = "bad_request"

class Capacity(TermgateError):
    """The gateway's capacity."""

    code = "capacity"

class Closed(TermgateError):
    """The gateway's closed."""

    code = "closed"

class Conflict(TermgateError):
    """The gateway's conflict."""

    code = "conflict"

class Forbidden(TermgateError):
    """The gateway's forbidden."""

    code = "forbidden"

class Gone(TermgateError):
    """The gateway's gone."""

    code = "gone"

class InputFull(TermgateError):
    """The gateway's input_full."""

    code = "input_full"

class InputOffset(TermgateError):
    """The gateway's input_offset."""

    code = "input_offset"

class InsufficientStorage(TermgateError):
    """The gateway's insufficient_storage."""

    code = "insufficient_storage"

class Internal(TermgateError):
    """The gateway's internal."""

    code = "internal"

class InvalidAfter(TermgateError):
    """The gateway's invalid_after."""

    code = "invalid_after"

class InvalidId(TermgateError):
    """The gateway's invalid_id."""

    code = "invalid_id"

class InvalidRequest(TermgateError):
    """The gateway's invalid_request."""

    code = "invalid_request"

class InvalidSpec(TermgateError):
    """The gateway's invalid_spec."""

    code = "invalid_spec"

class NoPipes(TermgateError):
    """The gateway's no_pipes."""

    code = "no_pipes"

class NotAttached(TermgateError):
    """The gateway's not_attached."""

    code = "not_attached"

class NotFound(TermgateError):
    """The gateway's not_found."""

    code = "not_found"

class NotPty(TermgateError):
    """The gateway's not_pty."""

    code = "not_pty"

class NotRunning(TermgateError):
    """The gateway's not_running."""

    code = "not_running"

class PreconditionFailed(TermgateError):
    """The gateway's precondition_failed."""

    code = "precondition_failed"

class RateLimited(TermgateError):
    """The gateway's rate_limited."""

    code = "rate_limited"

class ReadOnly(TermgateError):
    """The gateway's read_only."""

    code = "read_only"

class Refused(TermgateError):
    """The gateway's refused."""

    code = "refused"

class RequestTimeout(TermgateError):
    """The gateway's request_timeout."""

    code = "request_timeout"

class SignalNotAllowed(TermgateError):
    """The gateway's signal_not_allowed."""

    code = "signal_not_allowed"

class TooLarge(TermgateError):
    """The gateway's too_large."""

    code = "too_large"

class TooManyChannels(TermgateError):
    """The gateway's too_many_channels."""

    code = "too_many_channels"

class TooManyConnections(TermgateError):
    """The gateway's too_many_connections."""

    code = "too_many_connections"

class TooManyStreams(TermgateError):
    """The gateway's too_many_streams."""

    code = "too_many_streams"

class Unauthorized(TermgateError):
    """The gateway's unauthorized."""

    code = "unauthorized"

class Unavailable(TermgateError):
    """The gateway's unavailable."""

    code = "unavailable"

class Unenforceable(TermgateError):
    """The gateway's unenforceable."""

    code = "unenforceable"

class Unsupported(TermgateError):
    """The gateway's unsupported."""

    code = "unsupported"


BY_CODE: Dict[str, Type[TermgateError]] = {cls.code: cls for cls in TermgateError.__subclasses__()}


def error_for(code: str, message: str = "", status: int = 0, retry_ms: int = 0, input_offset: Optional[int] = None) -> TermgateError:
    """error_for is the exception of code: its class, or TermgateError for a
    code this client does not know (a newer gateway's)."""
    return BY_CODE.get(code, TermgateError)(code, message, status, retry_ms, input_offset)


class ConnectionLost(Exception):
    """The gateway could not be reached again within the reconnect budget."""
