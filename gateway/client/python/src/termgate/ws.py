"""termgate's WebSocket protocol (gateway/PROTOCOL.md) for asyncio:
AsyncSession holds one connection and follows executions over it. It hides
disconnects: it reconnects with backoff and jitter, reattaches every
execution after the last event it delivered (with the bytes it saw, so a
gap is exact, and acknowledging what was processed, so a holding execution
loses nothing), and resends the input the gateway lacks, by offset, so
each byte is applied once."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable, Dict, List, Optional, Union

import websockets

from ._wire import BEARER_PREFIX, FATAL, INPUT_REFUSED, STREAMS, SUBPROTOCOL, decode_output, encode_input
from .errors import ConnectionLost, InputOffset, NotAttached, TermgateError, error_for

Token = Union[str, Callable[[], Optional[str]]]

ACK_BYTES = 64 << 10  # output processed before an ack goes out at once
INPUT_FRAME = 16 << 10  # input bytes per frame
INPUT_WINDOW = 64 << 10  # input sent ahead of what the gateway confirmed
REFUSED_PAUSE = (0.2, 3.2)  # the pause before refused input goes again, doubling


@dataclass(frozen=True)
class Output:
    """Output the program wrote: stream is pty, stdout or stderr."""

    seq: int
    stream: str
    data: bytes
    offset: int


@dataclass(frozen=True)
class Gap:
    """Output the gateway no longer held: bytes of it (an upper bound when
    inexact), and why (cause)."""

    from_seq: int
    to_seq: int
    bytes: int
    cause: str
    inexact: bool


@dataclass(frozen=True)
class Exit:
    """How the execution ended: its code, or the signal that ended it."""

    code: int
    signal: str
    reason: str
    seq: int = field(default=0, repr=False)


@dataclass(frozen=True)
class Event:
    """Another event: started, resize, stdin-closed, signal or notice."""

    seq: int
    kind: str
    message: Dict[str, Any]


AnyEvent = Union[Output, Gap, Exit, Event]


class AsyncExecution:
    """One execution followed over the session: iterate events(), write
    input, resize, signal, cancel. Its events come in order, each once,
    across reconnects."""

    def __init__(self, session: "AsyncSession", start: Optional[Dict[str, Any]], id: str):
        self._s = session
        self._start = start  # until started: sent again after a reconnect (the id makes it idempotent)
        self.id = id
        self.channel: Optional[int] = None
        self.incarnation = ""
        self.last_seq = 0
        self.seen = 0  # output bytes up to last_seq (events' data and gaps' bytes)
        self.exit: Optional[Exit] = None
        self.pty = False
        self._queue: "asyncio.Queue[Optional[AnyEvent]]" = asyncio.Queue()
        self._processed = 0
        self._acked = 0
        self._unacked_bytes = 0
        self._input = bytearray()  # input from _input_base on, not yet confirmed by the gateway
        self._input_base = 0
        self._sent = 0  # input offset sent so far
        self._closed = False
        self._attached = asyncio.Event()
        self._failed: Optional[TermgateError] = None
        self._following = False
        self._ended = False  # events() has delivered the end
        self._seen_known = start is not None  # seen counts every byte from the first event
        self._flushing = asyncio.Lock()
        self._pause = REFUSED_PAUSE[0]
        self._retry: Optional[asyncio.TimerHandle] = None

    @property
    def input_offset(self) -> int:
        """input_offset is how much input was written (the next byte's offset)."""
        return self._input_base + len(self._input)

    async def events(self) -> AsyncIterator[AnyEvent]:
        """events yields the execution's events until its exit (Exit is the
        last). An event counts as processed, and is acknowledged, once the
        next one is asked for."""
        while True:
            if self._ended and self._queue.empty():
                if self._failed:
                    raise self._failed
                return
            if self._queue.empty():
                await self._ack()
            ev = await self._queue.get()
            if ev is None:
                self._ended = True
                continue
            yield ev
            if isinstance(ev, (Output, Event, Exit)):
                self._processed = max(self._processed, ev.seq)
            if isinstance(ev, Output):
                self._unacked_bytes += len(ev.data)
                if self._unacked_bytes >= ACK_BYTES:
                    await self._ack()
            if isinstance(ev, Exit):
                self._ended = True
                return

    async def wait(self) -> Exit:
        """wait drains the events and returns the exit (at once when they
        were drained already)."""
        async for ev in self.events():
            if isinstance(ev, Exit):
                return ev
        if self.exit is not None:
            return self.exit
        raise error_for("closed", "the execution was detached")

    async def write(self, data: Union[bytes, str]) -> None:
        """write sends input; after a reconnect what the gateway lacks is
        sent again from its input offset, so it is applied once."""
        b = data.encode() if isinstance(data, str) else bytes(data)
        self._input += b
        await self._flush()

    async def close_stdin(self) -> None:
        """close_stdin delivers end of file once the gateway has all the
        input written before it."""
        for _ in range(100):
            await self._flush()
            ch = await self._channel()
            try:
                await self._request({"type": "close-stdin", "channel": ch, "input_offset": self.input_offset})
                return
            except InputOffset as err:  # it lacks input: send it, then close again
                self._sent = max(int(err.input_offset or 0), self._input_base)
            except (ConnectionError, NotAttached):
                await asyncio.sleep(0.05)  # again once reattached
        raise error_for("input_offset", "the gateway never received the input before end of file")

    async def resize(self, rows: int, cols: int) -> None:
        await self._on_channel({"type": "resize", "rows": rows, "cols": cols})

    async def signal(self, name: str) -> None:
        await self._on_channel({"type": "signal", "signal": name})

    async def _on_channel(self, m: Dict[str, Any]) -> None:
        while True:
            try:
                await self._request({**m, "channel": await self._channel()})
                return
            except (ConnectionError, NotAttached):
                await asyncio.sleep(0.05)  # again once reattached

    async def cancel(self) -> None:
        await self._s._request({"type": "cancel", "id": self.id})

    async def detach(self) -> None:
        if self.channel is not None and not self._closed:
            try:
                await self._s._send({"type": "detach", "channel": self.channel})
            except ConnectionError:
                pass  # gone with the connection
        self._finish()

    # --- driven by the session ---

    async def _channel(self) -> int:
        while True:
            if self._closed:
                raise error_for("not_running" if self.exit else "closed", "the execution ended" if self.exit else "the execution is no longer followed")
            await self._attached.wait()
            if self.channel is not None:
                return self.channel

    async def _request(self, m: Dict[str, Any]) -> Dict[str, Any]:
        return await self._s._request(m)

    def _attach_message(self) -> Dict[str, Any]:
        if self._start is not None:
            return {**self._start, "ack": True}
        m: Dict[str, Any] = {"type": "attach", "id": self.id, "after": self.last_seq, "ack": True}
        if self.incarnation:
            m["incarnation"] = self.incarnation
        if self.last_seq > 0 and self._seen_known:
            m["seen"] = self.seen  # so that a gap's bytes are exact
        return m

    def _on_attached(self, m: Dict[str, Any]) -> None:
        self._start = None
        self.channel = m.get("channel")
        self.id = m.get("id", self.id)
        self.pty = bool(m.get("pty"))
        inc = m.get("incarnation", "")
        if self.incarnation and inc and inc != self.incarnation:
            self.last_seq = self.seen = self._processed = self._acked = 0  # a new execution under the ID
            self._seen_known = True
        self.incarnation = inc or self.incarnation
        self._acked = max(self._acked, self.last_seq)
        self._unacked_bytes = 0
        got = int(m.get("input_offset", 0))
        self._confirm(got)
        self._sent = max(got, self._input_base)
        self._attached.set()

    def _confirm(self, offset: int) -> None:
        if offset > self._input_base:
            del self._input[: min(offset - self._input_base, len(self._input))]
            self._input_base = offset

    async def _flush(self) -> None:
        """_flush sends the input not sent yet on this connection, at most
        INPUT_WINDOW ahead of what the gateway confirmed; one at a time."""
        async with self._flushing:
            while not self._closed and self.channel is not None and self._sent < self.input_offset:
                if self._sent - self._input_base >= INPUT_WINDOW:
                    return  # the next input-ack goes on
                ch, off = self.channel, self._sent
                start = off - self._input_base
                chunk = bytes(self._input[start : start + min(INPUT_FRAME, INPUT_WINDOW - start)])
                await self._s._send_bytes(encode_input(ch, off, chunk))
                if self.channel != ch:
                    return  # reattached meanwhile: that one sends from the gateway's offset
                self._sent = max(self._sent, off + len(chunk))

    def _refused(self, received: int) -> None:
        """_refused sends input again from received, the gateway's offset,
        after a pause that doubles while refusals go on."""
        self._sent = max(received, self._input_base)
        if self._retry is not None:
            return
        pause, self._pause = self._pause, min(self._pause * 2, REFUSED_PAUSE[1])

        def again() -> None:
            self._retry = None
            asyncio.ensure_future(self._flush())

        self._retry = asyncio.get_running_loop().call_later(pause * (0.5 + random.random() / 2), again)

    def _on_output(self, seq: int, stream: int, offset: int, data: bytes) -> None:
        if seq <= self.last_seq:
            return  # a replay's overlap
        self.last_seq = seq
        self.seen += len(data)
        self._queue.put_nowait(Output(seq, STREAMS.get(stream, str(stream)), data, offset))

    def _on_message(self, m: Dict[str, Any]) -> None:
        t = m["type"]
        if t == "input-ack":
            received = int(m.get("input_offset", 0))
            if received > self._input_base:
                self._pause = REFUSED_PAUSE[0]
            self._confirm(received)
            if int(m.get("input_end", 0)) > received:
                self._refused(received)  # frames past received were refused
            else:
                asyncio.ensure_future(self._flush())  # the window moved
            return
        if t == "gap":
            self.last_seq = int(m.get("to", 1)) - 1
            self.seen += int(m.get("bytes", 0))
            self._queue.put_nowait(Gap(int(m.get("from", 0)), int(m.get("to", 0)), int(m.get("bytes", 0)), m.get("cause", ""), bool(m.get("inexact"))))
            return
        seq = int(m.get("seq", 0))
        if seq and seq <= self.last_seq:
            return
        self.last_seq = max(self.last_seq, seq)
        if t == "exit":
            self.exit = Exit(int(m.get("code", -1)), m.get("signal", ""), m.get("reason", ""), seq)
            self._queue.put_nowait(self.exit)
            self._closed = True
        elif t == "event":
            self._queue.put_nowait(Event(seq, m.get("event", ""), m))

    def _on_error(self, m: Dict[str, Any]) -> None:
        code = m.get("error", "internal")
        if code in INPUT_REFUSED and "input_offset" in m:
            self._refused(int(m["input_offset"]))
            return
        if code in FATAL:
            self._failed = error_for(code, m.get("message", ""), retry_ms=int(m.get("retry_ms", 0)))
            self._finish()

    async def _ack(self) -> None:
        if self.channel is not None and self._processed > self._acked and not self._closed:
            self._acked = self._processed
            self._unacked_bytes = 0
            try:
                await self._s._send({"type": "ack", "channel": self.channel, "seq": self._processed})
            except ConnectionError:
                pass  # the reattach says where the client is

    def _finish(self) -> None:
        if not self._closed or self._failed:
            self._closed = True
        self._queue.put_nowait(None)
        self._attached.set()


class AsyncSession:
    """AsyncSession follows executions over one WebSocket to a gateway.
    url is its /v1/connect URL (ws:// or wss://, or the gateway's http(s)
    base), token a bearer token or a function returning a fresh one."""

    def __init__(self, url: str, token: Token, *, reconnect_budget: float = 60.0, min_delay: float = 0.25, max_delay: float = 10.0):
        if url.startswith("http"):
            url = "ws" + url[4:].rstrip("/") + "/v1/connect"
        self._url = url
        self._token = token
        self._budget = reconnect_budget
        self._min, self._max = min_delay, max_delay
        self._ws: Any = None
        self._executions: List[AsyncExecution] = []
        self._by_channel: Dict[int, AsyncExecution] = {}
        self._by_req: Dict[str, AsyncExecution] = {}  # starts and attaches waiting for attached
        self._pending: Dict[str, "asyncio.Future[Dict[str, Any]]"] = {}
        self._reqs = itertools.count(1)
        self._reader: Optional["asyncio.Task[None]"] = None
        self._up = asyncio.Event()
        self._closed = False
        self._end: Optional[TermgateError] = None  # why the session ended, when it did by itself
        self.hello: Dict[str, Any] = {}
        self.reconnects = 0

    async def connect(self) -> "AsyncSession":
        """connect opens the first connection; a refused token raises
        Unauthorized."""
        await self._open()
        self._reader = asyncio.ensure_future(self._run())
        return self

    async def __aenter__(self) -> "AsyncSession":
        return await self.connect()

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def start(self, command: Optional[str] = None, args: Optional[List[str]] = None, *, id: Optional[str] = None,
                    pty: Optional[Dict[str, int]] = None, **options: Any) -> AsyncExecution:
        """start starts an execution and follows it. id makes it idempotent
        (one is made when absent, so that a start sent again after a
        reconnect makes no second execution); options are the start's
        other fields (env, cwd, interactive, timeout_ms, network, ...)."""
        m: Dict[str, Any] = {"type": "start", "id": id or "py-" + os.urandom(10).hex(), "attach": True, **options}
        if command is not None:
            m["command"] = command
        if args is not None:
            m["args"] = args
        if pty is not None:
            m["pty"] = pty
        ex = AsyncExecution(self, m, m["id"])
        await self._follow(ex)
        return ex

    async def attach(self, id: str, *, after: int = 0, incarnation: str = "") -> AsyncExecution:
        """attach follows execution id after event after (0: from the first
        retained), which belongs to incarnation."""
        ex = AsyncExecution(self, None, id)
        ex.last_seq, ex.incarnation = after, incarnation
        ex._seen_known = after == 0
        await self._follow(ex)
        return ex

    async def exec(self, **body: Any) -> Dict[str, Any]:
        """exec is the agent exec call over the WebSocket (POST /v1/exec's
        body); it returns the exec result."""
        if not body.get("id") and ("argv" in body or "command" in body):
            body["id"] = "py-" + os.urandom(10).hex()
        while True:
            try:
                m = await self._request({"type": "exec", "exec": body})
                return m["result"]
            except ConnectionError:
                continue  # the id makes it safe to send again

    async def aclose(self) -> None:
        self._closed = True
        self._fail_pending(error_for("closed", "the session was closed"))
        self._up.set()  # waiters see it closed
        for ex in self._executions:
            ex._finish()
        if self._ws is not None:
            await self._ws.close()
        if self._reader is not None:
            self._reader.cancel()
            try:
                await self._reader
            except (asyncio.CancelledError, Exception):
                pass

    def drop(self) -> None:
        """drop breaks the connection as a network failure would (tests)."""
        if self._ws is not None:
            self._ws.transport.abort()

    # --- internals ---

    async def _follow(self, ex: AsyncExecution) -> None:
        """_follow starts or attaches ex, again on the next connection when
        this one is lost first."""
        if ex not in self._executions:
            self._executions.append(ex)
        ex._following = True
        try:
            while True:
                await self._up.wait()
                if self._closed:
                    raise self._end or error_for("closed", "the session was closed")
                req = str(next(self._reqs))
                self._by_req[req] = ex
                try:
                    await self._request(ex._attach_message(), req)
                    return
                except ConnectionError:
                    continue
                except TermgateError:
                    self._executions.remove(ex)
                    raise
        finally:
            ex._following = False

    async def _follow_again(self, ex: AsyncExecution) -> None:
        try:
            await self._follow(ex)
        except TermgateError as err:
            ex._failed = err
            ex._finish()

    async def _open(self) -> None:
        token = self._token() if callable(self._token) else self._token
        if not token:
            raise error_for("unauthorized", "no token to be had")
        try:
            ws = await websockets.connect(self._url, subprotocols=[SUBPROTOCOL, BEARER_PREFIX + token], max_size=None, ping_interval=20)
        except websockets.exceptions.InvalidStatusCode as err:
            if err.status_code == 401:
                raise error_for("unauthorized", "the gateway refused the token", 401) from err
            raise
        await ws.send(json.dumps({"type": "ping", "req": "hello"}))
        while True:  # the hello, then the pong that ends the handshake
            m = json.loads(await ws.recv())
            if m.get("type") == "hello":
                self.hello = m
            elif m.get("type") == "pong" and m.get("req") == "hello":
                break
        self._ws = ws
        self._by_channel.clear()
        self._up.set()

    async def _run(self) -> None:
        try:
            while not self._closed:
                try:
                    async for raw in self._ws:
                        self._dispatch(raw)
                except (websockets.exceptions.ConnectionClosed, OSError):
                    pass
                except ValueError:  # a malformed frame: the connection is not to be trusted
                    await self._ws.close()
                if self._closed:
                    return
                self._lost()
                await self._reconnect()
                for ex in self._executions:
                    if not ex._closed and not ex._following:
                        asyncio.ensure_future(self._follow_again(ex))
        except asyncio.CancelledError:
            raise
        except BaseException as err:  # the reader is gone: nothing waits for it in vain
            if not self._closed:
                self._fail_all(err if isinstance(err, TermgateError) else error_for("closed", f"the connection's reader failed: {err!r}"))
            if not isinstance(err, (TermgateError, ConnectionLost)):
                raise

    def _lost(self) -> None:
        self._up.clear()
        self._fail_pending(ConnectionError("termgate: the connection was lost"))
        self._by_req.clear()
        self._executions = [ex for ex in self._executions if not ex._closed]
        for ex in self._executions:
            ex.channel = None
            ex._attached.clear()

    def _fail_pending(self, err: BaseException) -> None:
        for f in self._pending.values():
            if not f.done():
                f.set_exception(err)
        self._pending.clear()

    async def _reconnect(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._budget
        for attempt in itertools.count(1):
            await asyncio.sleep(random.random() * min(self._max, self._min * 2 ** min(attempt, 30)))
            try:
                await self._open()
                self.reconnects += 1
                return
            except TermgateError as err:
                self._fail_all(err)
                raise
            except (OSError, asyncio.TimeoutError, websockets.exceptions.WebSocketException):
                if loop.time() > deadline:
                    self._fail_all(error_for("closed", f"the gateway was unreachable for {self._budget:.0f} s"))
                    raise ConnectionLost(f"termgate: the gateway was unreachable for {self._budget:.0f} s")

    def _fail_all(self, err: TermgateError) -> None:
        self._closed, self._end = True, err
        self._fail_pending(err)
        self._up.set()  # waiters see it closed
        for ex in self._executions:
            ex._failed = err
            ex._finish()

    def _dispatch(self, raw: Union[str, bytes]) -> None:
        if isinstance(raw, bytes):
            f = decode_output(raw)
            if f is not None and f.channel in self._by_channel:
                self._by_channel[f.channel]._on_output(f.seq, f.stream, f.offset, f.data)
            return
        m = json.loads(raw)
        t, req = m.get("type"), m.get("req")
        ex = self._by_req.get(req) if req else None
        if ex is not None and t == "started":
            ex.id, ex._start = m.get("id", ex.id), None  # attached follows, with the same req
            return
        if ex is not None and t == "attached":
            del self._by_req[req]
            if ex._closed:  # detached meanwhile: let the gateway know, or it holds output for it
                asyncio.ensure_future(self._send({"type": "detach", "channel": m["channel"]}))
            else:
                ex._on_attached(m)
                self._by_channel[m["channel"]] = ex
                asyncio.ensure_future(ex._flush())
        elif ex is not None:
            del self._by_req[req]
        if req and req in self._pending:
            fut = self._pending.pop(req)
            if fut.done():
                return
            if t == "error":
                fut.set_exception(error_for(m.get("error", "internal"), m.get("message", ""), retry_ms=int(m.get("retry_ms", 0)), input_offset=m.get("input_offset")))
            else:
                fut.set_result(m)
            return
        target = self._by_channel.get(m.get("channel", 0))
        if target is None:
            return
        if t == "error":
            target._on_error(m)
        elif t in ("event", "exit", "gap", "input-ack"):
            target._on_message(m)

    async def _request(self, m: Dict[str, Any], req: Optional[str] = None) -> Dict[str, Any]:
        await self._up.wait()
        if self._closed:
            raise self._end or error_for("closed", "the session was closed")
        req = req or str(next(self._reqs))
        fut: "asyncio.Future[Dict[str, Any]]" = asyncio.get_running_loop().create_future()
        self._pending[req] = fut
        await self._send({**m, "req": req})
        return await fut

    async def _send(self, m: Dict[str, Any]) -> None:
        try:
            await self._ws.send(json.dumps(m))
        except websockets.exceptions.ConnectionClosed as err:
            raise ConnectionError("termgate: the connection was lost") from err

    async def _send_bytes(self, b: bytes) -> None:
        try:
            await self._ws.send(b)
        except websockets.exceptions.ConnectionClosed:
            pass  # sent again after the reattach, from the gateway's offset
