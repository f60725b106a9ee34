"""termgate's Python client (gateway/PROTOCOL.md): run commands in
termgate's Linux sandboxes.

- Client and AsyncClient make the HTTP API's calls: agent exec (exec, write:
  output as text, returned at the exit or after yield_ms), executions,
  files and previews.
- AsyncSession (asyncio) and Session (blocking) follow executions over one
  WebSocket: start, attach, events with exact gaps, input by offset applied
  once, resize, signals, cancel; they resume after every disconnect with
  nothing lost or repeated.

A refusal by the gateway raises the TermgateError subclass named after its
code: NotFound, Forbidden, Unauthorized, ...
"""

from ._wire import CODES
from .errors import *  # noqa: F401,F403  the exception of each code
from .errors import ConnectionLost, TermgateError, error_for
from .http import AsyncClient, Client, ExecResult, FileEntry
from .sync import Execution, Session
from .ws import AsyncExecution, AsyncSession, Event, Exit, Gap, Output

__all__ = [
    "AsyncClient", "AsyncExecution", "AsyncSession", "CODES", "Client", "ConnectionLost", "Event", "ExecResult",
    "Execution", "Exit", "FileEntry", "Gap", "Output", "Session", "TermgateError", "error_for",
]
