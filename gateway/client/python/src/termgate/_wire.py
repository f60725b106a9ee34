"""The parts of termgate's wire protocol v1 (gateway/PROTOCOL.md) the client
shares with the gateway: the subprotocol, the binary frames and the error
codes. It mirrors the Go package gateway/wire; no state, no I/O."""

from __future__ import annotations

import struct
from dataclasses import dataclass

SUBPROTOCOL = "termgate.v1"
BEARER_PREFIX = "termgate.bearer."
CLOSE_SERVICE_RESTART = 1012

_OUTPUT = 0x01
_INPUT = 0x02
_OUTPUT_HEADER = struct.Struct(">BIQBQI")  # type, channel, seq, stream, offset, length
_INPUT_HEADER = struct.Struct(">BIQ")  # type, channel, offset

STREAMS = {1: "pty", 2: "stdout", 3: "stderr"}

# CODES are every error code the gateway sends, over the WebSocket or HTTP
# (gateway/wire's Codes; a Go test keeps this tuple in step: one sorted
# tuple of quoted codes).
CODES = (
    "bad_request", "capacity", "closed", "conflict", "forbidden", "gone", "input_full", "input_offset",
    "insufficient_storage", "internal", "invalid_after", "invalid_id", "invalid_request", "invalid_spec",
    "no_pipes", "not_attached", "not_found", "not_pty", "not_running", "precondition_failed", "rate_limited",
    "read_only", "refused", "request_timeout", "signal_not_allowed", "too_large", "too_many_channels",
    "too_many_connections", "too_many_streams", "unauthorized", "unavailable", "unenforceable", "unsupported",
)

# FATAL are the codes after which an execution cannot be followed any more,
# when they answer its start or attach (gateway/wire's Fatal).
FATAL = (
    "capacity", "conflict", "forbidden", "gone", "invalid_id", "invalid_spec", "not_found",
    "too_many_channels", "unauthorized", "unenforceable",
)

# INPUT_REFUSED are the codes refusing input, which is then resent from the
# offset the error reports (gateway/wire's InputRefused).
INPUT_REFUSED = ("input_full", "input_offset", "rate_limited", "unavailable")


@dataclass(frozen=True)
class OutputFrame:
    channel: int
    seq: int
    stream: int
    offset: int
    data: bytes


def decode_output(b: bytes) -> OutputFrame | None:
    """decode_output parses an output frame; None for another kind. A frame
    whose length field disagrees with its size raises ValueError."""
    if not b or b[0] != _OUTPUT:
        return None
    if len(b) < _OUTPUT_HEADER.size:
        raise ValueError(f"termgate: output frame of {len(b)} bytes has no full header")
    _, channel, seq, stream, offset, length = _OUTPUT_HEADER.unpack_from(b)
    if length != len(b) - _OUTPUT_HEADER.size:
        raise ValueError(f"termgate: output frame holds {len(b) - _OUTPUT_HEADER.size} bytes, its header says {length}")
    return OutputFrame(channel, seq, stream, offset, bytes(b[_OUTPUT_HEADER.size:]))


def encode_input(channel: int, offset: int, data: bytes) -> bytes:
    """encode_input builds an input frame: data starts at input offset offset."""
    return _INPUT_HEADER.pack(_INPUT, channel, offset) + data
