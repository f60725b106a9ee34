"""Measures the Python SDK (asyncio): the rate at which it reads a
command's terminal output, and the memory an idle attached session costs.
python clients_bench.py URL TOKEN CMD IDLE"""

import asyncio
import gc
import json
import sys
import time

import termgate


def rss() -> int:
    gc.collect()
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


async def main(url: str, token: str, cmd: str, idle: int) -> None:
    async with termgate.AsyncSession(url, token) as s:
        t0 = time.monotonic()
        ex = await s.start("/bin/sh", ["-c", cmd], pty={"rows": 24, "cols": 80})
        n = 0
        async for ev in ex.events():
            if isinstance(ev, termgate.Output):
                n += len(ev.data)
        ms = (time.monotonic() - t0) * 1000
        before = rss()
        exs = [await s.start("/bin/sh", ["-c", "sleep 120"], pty={"rows": 24, "cols": 80}) for _ in range(idle)]
        await asyncio.sleep(0.5)
        after = rss()
        for e in exs:
            await e.cancel()
    print(json.dumps({"bytes": n, "ms": ms, "idleKiB": (after - before) / 1024 / idle}))


asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
