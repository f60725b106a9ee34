"""termgate's HTTP API (gateway/PROTOCOL.md, "HTTP API"): agent exec,
executions, files and previews, as Client (blocking) and AsyncClient
(asyncio), both on httpx. Every call is safe to send again, and is sent
again after a failure to reach the gateway or an `unavailable` answer: a
start carries an id, a write its input offset, a read its seq."""

from __future__ import annotations

import asyncio
import os
import random
import time
from typing import Any, Callable, Dict, List, Optional, Tuple, TypedDict, Union
from urllib.parse import quote

import httpx

from .errors import TermgateError, error_for

Token = Union[str, Callable[[], Optional[str]]]


class ExecExit(TypedDict, total=False):
    code: int
    signal: str
    reason: str


class ExecResult(TypedDict, total=False):
    """An agent exec answer: output as text (stdout and stderr in the order
    written), how it ended or that it runs, and where the next call reads."""

    id: str
    running: bool
    exit: ExecExit
    output: str
    omitted_bytes: int
    omitted_at: int
    replaced_bytes: int
    lost_bytes: int
    from_seq: int
    next_seq: int
    input_offset: int
    incarnation: str


class FileEntry(TypedDict, total=False):
    name: str
    raw: str
    type: str
    size: int
    mode: str
    mtime: str
    target: str
    etag: str


_Request = Tuple[str, str, Optional[Dict[str, str]], Optional[bytes], Optional[Any]]


def _new_id() -> str:
    return "x-" + os.urandom(10).hex()


def _files_path(path: str, id: Optional[str]) -> str:
    p = "/".join(quote(n, safe="") for n in path.lstrip("/").split("/"))
    return f"/v1/executions/{quote(id, safe='')}/files/{p}" if id else f"/v1/files/{p}"


def _backoff(attempt: int) -> float:
    return random.random() * min(10.0, 0.25 * 2 ** attempt)


class _Calls:
    """What Client and AsyncClient share: each call as a request to send."""

    def __init__(self, url: str, token: Token, retries: int):
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"termgate: url {url!r} must start with http:// or https://")
        self._url = url.rstrip("/")
        self._token = token
        self._retries = retries

    def _bearer(self) -> str:
        t = self._token() if callable(self._token) else self._token
        if not t:
            raise error_for("unauthorized", "no token to be had")
        return t

    @staticmethod
    def _exec(req: Dict[str, Any]) -> _Request:
        body = dict(req)
        if not body.get("id") and ("argv" in body or "command" in body):
            body["id"] = _new_id()  # a retried start finds what its first try made
        return ("POST", "/v1/exec", None, None, body)

    @staticmethod
    def _write(id: str, input: str, offset: Optional[int], wait: Dict[str, Any]) -> _Request:
        body: Dict[str, Any] = {"input": input, **wait}
        if offset is not None:
            body["offset"] = offset
        return ("POST", f"/v1/executions/{quote(id, safe='')}/write", None, None, body)

    @staticmethod
    def _error(resp: httpx.Response) -> TermgateError:
        code, message = "internal", f"the gateway answered {resp.status_code}"
        if resp.headers.get("content-type", "").startswith("application/json"):
            try:
                b = resp.json()
                code, message = b.get("error", code), b.get("message", "")
            except ValueError:
                pass
        return error_for(code, message, resp.status_code)


class Client(_Calls):
    """Client calls a gateway's HTTP API, blocking. url is its base URL,
    token a bearer token or a function returning a fresh one."""

    def __init__(self, url: str, token: Token, *, retries: int = 2, timeout: float = 90.0):
        super().__init__(url, token, retries)
        self._http = httpx.Client(timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def exec(self, command: Optional[str] = None, *, argv: Optional[List[str]] = None, **options: Any) -> ExecResult:
        """exec runs command (by /bin/sh -c) or argv, or continues the
        execution options["id"] names, and waits for its exit or yield_ms.
        options are POST /v1/exec's fields (cwd, env, tty, interactive,
        stdin, yield_ms, max_output_bytes, seq, the start options...)."""
        req = dict(options)
        if command is not None:
            req["command"] = command
        if argv is not None:
            req["argv"] = argv
        return self._send(self._exec(req)).json()

    def write(self, id: str, input: str, *, offset: Optional[int] = None, **wait: Any) -> ExecResult:
        """write writes input to execution id at offset (the input offset it
        starts at: a retry is then applied once) and waits for what follows."""
        # Without an offset a retry could write the input twice: none then.
        return self._send(self._write(id, input, offset, wait), safe=offset is not None).json()

    def list(self) -> Dict[str, Any]:
        return self._send(("GET", "/v1/executions", None, None, None)).json()

    def get(self, id: str) -> Dict[str, Any]:
        return self._send(("GET", f"/v1/executions/{quote(id, safe='')}", None, None, None)).json()

    def cancel(self, id: str) -> Dict[str, Any]:
        return self._send(("POST", f"/v1/executions/{quote(id, safe='')}/cancel", None, None, None)).json()

    def read_file(self, path: str, *, id: Optional[str] = None) -> bytes:
        return self._send(("GET", _files_path(path, id), None, None, None)).content

    def write_file(self, path: str, data: Union[bytes, str], *, id: Optional[str] = None, mode: Optional[str] = None) -> FileEntry:
        q = f"?mode={quote(mode)}" if mode else ""
        body = data.encode() if isinstance(data, str) else data
        return self._send(("PUT", _files_path(path, id) + q, {"Content-Type": "application/octet-stream"}, body, None)).json()

    def list_files(self, path: str, *, id: Optional[str] = None) -> List[FileEntry]:
        return self._send(("GET", _files_path(path.rstrip("/") + "/", id), None, None, None)).json()["entries"]

    def ports(self, id: str) -> List[Dict[str, Any]]:
        """ports lists the TCP ports execution id's programs listen on."""
        return self._send(("GET", f"/v1/executions/{quote(id, safe='')}/ports", None, None, None)).json()["ports"]

    def preview(self, id: str, port: int, ttl_seconds: Optional[int] = None) -> Dict[str, str]:
        body = {"ttl_seconds": ttl_seconds} if ttl_seconds else {}
        return self._send(("POST", f"/v1/executions/{quote(id, safe='')}/ports/{port}/preview", None, None, body)).json()

    def _send(self, r: _Request, safe: bool = True) -> httpx.Response:
        """_send sends r, again after a failure to reach the gateway or an
        unavailable answer when it is safe to repeat."""
        method, path, headers, content, body = r
        retries = self._retries if safe else 0
        for attempt in range(retries + 1):
            h = {"Authorization": f"Bearer {self._bearer()}", **(headers or {})}
            try:
                resp = self._http.request(method, self._url + path, headers=h, content=content, json=body)
            except httpx.TransportError:
                if attempt == retries:
                    raise
                time.sleep(_backoff(attempt + 1))
                continue
            if resp.is_success:
                return resp
            err = self._error(resp)
            if err.code != "unavailable" or attempt == retries:
                raise err
            time.sleep(_backoff(attempt + 1))
        raise AssertionError("unreachable")


class AsyncClient(_Calls):
    """AsyncClient is Client for asyncio."""

    def __init__(self, url: str, token: Token, *, retries: int = 2, timeout: float = 90.0):
        super().__init__(url, token, retries)
        self._http = httpx.AsyncClient(timeout=timeout)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def exec(self, command: Optional[str] = None, *, argv: Optional[List[str]] = None, **options: Any) -> ExecResult:
        req = dict(options)
        if command is not None:
            req["command"] = command
        if argv is not None:
            req["argv"] = argv
        return (await self._send(self._exec(req))).json()

    async def write(self, id: str, input: str, *, offset: Optional[int] = None, **wait: Any) -> ExecResult:
        return (await self._send(self._write(id, input, offset, wait), safe=offset is not None)).json()

    async def list(self) -> Dict[str, Any]:
        return (await self._send(("GET", "/v1/executions", None, None, None))).json()

    async def get(self, id: str) -> Dict[str, Any]:
        return (await self._send(("GET", f"/v1/executions/{quote(id, safe='')}", None, None, None))).json()

    async def cancel(self, id: str) -> Dict[str, Any]:
        return (await self._send(("POST", f"/v1/executions/{quote(id, safe='')}/cancel", None, None, None))).json()

    async def read_file(self, path: str, *, id: Optional[str] = None) -> bytes:
        return (await self._send(("GET", _files_path(path, id), None, None, None))).content

    async def write_file(self, path: str, data: Union[bytes, str], *, id: Optional[str] = None, mode: Optional[str] = None) -> FileEntry:
        q = f"?mode={quote(mode)}" if mode else ""
        body = data.encode() if isinstance(data, str) else data
        return (await self._send(("PUT", _files_path(path, id) + q, {"Content-Type": "application/octet-stream"}, body, None))).json()

    async def list_files(self, path: str, *, id: Optional[str] = None) -> List[FileEntry]:
        return (await self._send(("GET", _files_path(path.rstrip("/") + "/", id), None, None, None))).json()["entries"]

    async def ports(self, id: str) -> List[Dict[str, Any]]:
        return (await self._send(("GET", f"/v1/executions/{quote(id, safe='')}/ports", None, None, None))).json()["ports"]

    async def preview(self, id: str, port: int, ttl_seconds: Optional[int] = None) -> Dict[str, str]:
        body = {"ttl_seconds": ttl_seconds} if ttl_seconds else {}
        return (await self._send(("POST", f"/v1/executions/{quote(id, safe='')}/ports/{port}/preview", None, None, body))).json()

    async def _send(self, r: _Request, safe: bool = True) -> httpx.Response:
        method, path, headers, content, body = r
        retries = self._retries if safe else 0
        for attempt in range(retries + 1):
            h = {"Authorization": f"Bearer {self._bearer()}", **(headers or {})}
            try:
                resp = await self._http.request(method, self._url + path, headers=h, content=content, json=body)
            except httpx.TransportError:
                if attempt == retries:
                    raise
                await asyncio.sleep(_backoff(attempt + 1))
                continue
            if resp.is_success:
                return resp
            err = self._error(resp)
            if err.code != "unavailable" or attempt == retries:
                raise err
            await asyncio.sleep(_backoff(attempt + 1))
        raise AssertionError("unreachable")
