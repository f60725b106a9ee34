"""The WebSocket client against a real gateway, through a proxy that cuts
the connection mid-stream: output resumes with no byte lost or repeated,
input across a cut is applied once."""

from __future__ import annotations

import asyncio

import pytest

import termgate


def collect(ex: termgate.Execution, on_output=None) -> tuple:
    out, gaps, exit = bytearray(), [], None
    for ev in ex.events():
        if isinstance(ev, termgate.Output):
            out += ev.data
            if on_output:
                on_output(len(out))
        elif isinstance(ev, termgate.Gap):
            gaps.append(ev)
        elif isinstance(ev, termgate.Exit):
            exit = ev
    return bytes(out), gaps, exit


def test_output_resumes_across_cuts(gateway: tuple, proxy) -> None:
    _, token = gateway
    want = "".join(f"{i}\n" for i in range(1, 200001)).encode()
    with termgate.Session(proxy.url, token, min_delay=0.05, max_delay=0.5) as s:
        ex = s.start("/bin/sh", ["-c", "seq 1 200000; exit 5"])
        marks = [len(want) // 4, len(want) // 2]

        def cut_at(n: int) -> None:
            if marks and n >= marks[0]:
                marks.pop(0)
                proxy.cut()

        out, gaps, exit = collect(ex, cut_at)
        assert s.reconnects >= 1
    assert gaps == [] and out == want, f"{len(out)} bytes of {len(want)}, gaps {gaps}"
    assert exit is not None and exit.code == 5


def test_a_gap_is_exact(gateway: tuple, proxy) -> None:
    """A live execution writes on while the network is down, more than the
    gateway's history holds (serve --ring-bytes 256K here): the reattach
    gets a gap whose bytes, with what arrived, are all the output."""
    _, token = gateway
    want = "".join(f"{i}\n" for i in range(1, 1000001)).encode()
    with termgate.Session(proxy.url, token, min_delay=0.05, max_delay=0.2) as s:
        ex = s.start("/bin/sh", ["-c", "seq 1 1000000"], flow="live")
        proxy.outage(1.5)
        out, gaps, exit = collect(ex)
    assert gaps and not any(g.inexact for g in gaps), gaps
    assert len(out) + sum(g.bytes for g in gaps) == len(want)
    assert want.endswith(out[-100:]) and exit.code == 0


def test_input_across_a_cut_is_applied_once(gateway: tuple, proxy) -> None:
    _, token = gateway
    with termgate.Session(proxy.url, token, min_delay=0.05, max_delay=0.5) as s:
        ex = s.start("/bin/sh", ["-c", "cat"], interactive=True)
        ex.write("one\n")
        proxy.cut()
        ex.write("two\n")
        ex.close_stdin()
        out, gaps, exit = collect(ex)
    assert out == b"one\ntwo\n" and gaps == [] and exit.code == 0


def test_async_session_cancel_resize_and_refusals(gateway: tuple) -> None:
    url, token = gateway

    async def main() -> None:
        async with termgate.AsyncSession(url, token) as s:
            ex = await s.start("/bin/sh", ["-c", "stty size; sleep 100"], pty={"rows": 30, "cols": 100})
            first = None
            async for ev in ex.events():
                if isinstance(ev, termgate.Output):
                    first = ev.data
                    break
            assert first is not None and first.startswith(b"30 100")
            await ex.resize(40, 120)
            await ex.cancel()
            exit = await ex.wait()
            assert exit.reason == "cancelled"
            r = await s.exec(command="echo over the socket")
            assert r["output"] == "over the socket\n"
            with pytest.raises(termgate.NotFound):
                await s.attach("nothing-here")
        with pytest.raises(termgate.Unauthorized):
            await termgate.AsyncSession(url, "not-a-token").connect()

    asyncio.run(main())


def test_large_input_through_a_cut_and_after_the_end(gateway: tuple, proxy) -> None:
    """300 KB of input, more than the gateway takes at once, goes through
    whole (a window at a time, refusals sent again), across a cut; after
    the exit, wait() answers at once and resize says the execution ended."""
    _, token = gateway
    with termgate.Session(proxy.url, token, min_delay=0.05, max_delay=0.5) as s:
        ex = s.start("/bin/sh", ["-c", "wc -c"], interactive=True)
        ex.write(b"x" * 150_000)
        proxy.cut()
        ex.write(b"y" * 150_000)
        ex.close_stdin()
        out, gaps, exit = collect(ex)
        assert out.strip() == b"300000" and exit.code == 0
        assert ex.wait() == exit
        with pytest.raises(termgate.NotRunning):
            ex.resize(30, 100)
