"""The HTTP API's calls against a real gateway, blocking and with asyncio."""

from __future__ import annotations

import asyncio
import time

import pytest

import termgate


def test_exec_write_and_errors(gateway: tuple) -> None:
    url, token = gateway
    with termgate.Client(url, token) as c:
        r = c.exec("echo hi; sleep 0.1; echo err >&2; exit 3", yield_ms=10000)
        assert r["output"] == "hi\nerr\n" and r["exit"]["code"] == 3 and not r["running"]
        r = c.exec("echo ready; read l; echo got $l", interactive=True, yield_ms=3000)  # it blocks on its read
        assert r["running"] and r["output"] == "ready\n"
        w = c.write(r["id"], "x\n", offset=0, yield_ms=10000)
        assert w["output"] == "got x\n" and w["exit"]["code"] == 0
        again = c.write(r["id"], "x\n", offset=0, yield_ms=0)  # a retry: applied once
        assert again["input_offset"] == 2
        with pytest.raises(termgate.NotFound) as e:
            c.exec(id="nothing-here")
        assert e.value.code == "not_found" and e.value.status == 404
    with termgate.Client(url, "not-a-token") as c, pytest.raises(termgate.Unauthorized):
        c.list()


def test_files(gateway: tuple) -> None:
    url, token = gateway
    with termgate.Client(url, token) as c:
        entry = c.write_file("py/notes.txt", "héllo\n", mode="0600")
        assert entry["mode"] == "0600" and entry["size"] == 7
        assert c.read_file("py/notes.txt") == "héllo\n".encode()
        assert [e["name"] for e in c.list_files("py")] == ["notes.txt"]
        assert c.exec("cat py/notes.txt")["output"] == "héllo\n"
        r = c.exec("python3 -m http.server --bind 127.0.0.1 8765", yield_ms=0)
        for _ in range(100):
            try:
                if any(p["port"] == 8765 for p in c.ports(r["id"])):
                    break
            except termgate.NotRunning:
                pass  # not running the command yet
            time.sleep(0.1)
        else:
            pytest.fail("the server's port never showed")
        c.cancel(r["id"])


def test_async_client(gateway: tuple) -> None:
    url, token = gateway

    async def main() -> dict:
        async with termgate.AsyncClient(url, token) as c:
            return await c.exec(argv=["/bin/sh", "-c", "echo async"])

    assert asyncio.run(main())["output"] == "async\n"


def test_an_exception_for_every_code() -> None:
    assert sorted(termgate.errors.BY_CODE) == sorted(termgate.CODES)
    assert isinstance(termgate.error_for("not_found"), termgate.NotFound)
    unknown = termgate.error_for("from_a_newer_gateway", "x")
    assert type(unknown) is termgate.TermgateError and unknown.code == "from_a_newer_gateway"
