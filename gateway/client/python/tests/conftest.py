"""Fixtures: the gateway the tests run against (a real termgate serve; the
Go test TestPythonSDK starts one and sets TERMGATE_URL, TERMGATE_TOKEN),
and a TCP proxy in front of it that can cut every connection."""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Iterator, List
from urllib.parse import urlparse

import pytest


@pytest.fixture(scope="session")
def gateway() -> tuple:
    url, token = os.environ.get("TERMGATE_URL"), os.environ.get("TERMGATE_TOKEN")
    if not url or not token:
        pytest.skip("TERMGATE_URL and TERMGATE_TOKEN name no gateway (go test ./cmd/termgate -run TestPythonSDK runs these)")
    return url, token


class CuttingProxy:
    """A TCP proxy on 127.0.0.1 to the gateway; cut() breaks every
    connection through it at once."""

    def __init__(self, target: str):
        u = urlparse(target)
        self._target = (u.hostname, u.port)
        self._ln = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._ln.getsockname()[1]}"
        self._conns: List[socket.socket] = []
        self._lock = threading.Lock()
        self.cuts = 0
        self._closed_until = 0.0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self._ln.accept()
            except OSError:
                return
            if time.monotonic() < self._closed_until:
                c.close()  # the network is down
                continue
            up = socket.create_connection(self._target)
            with self._lock:
                self._conns += [c, up]
            for a, b in ((c, up), (up, c)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a: socket.socket, b: socket.socket) -> None:
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                b.sendall(data)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self) -> None:
        with self._lock:
            conns, self._conns = self._conns, []
            self.cuts += 1
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
                s.close()
            except OSError:
                pass

    def outage(self, seconds: float) -> None:
        """outage cuts every connection and refuses new ones for seconds."""
        self._closed_until = time.monotonic() + seconds
        self.cut()

    def close(self) -> None:
        self._ln.close()
        self.cut()


@pytest.fixture
def proxy(gateway: tuple) -> Iterator[CuttingProxy]:
    p = CuttingProxy(gateway[0])
    yield p
    p.close()
