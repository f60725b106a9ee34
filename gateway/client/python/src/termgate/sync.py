"""Session and Execution: the WebSocket client (ws.py) for code that does
not use asyncio. A Session runs its AsyncSession on an event loop of its
own, in a thread it starts and stops."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Coroutine, Dict, Iterator, List, Optional, TypeVar, Union

from .ws import AnyEvent, AsyncExecution, AsyncSession, Exit, Token

T = TypeVar("T")


class Session:
    """Session follows executions over one WebSocket, blocking. See
    AsyncSession."""

    def __init__(self, url: str, token: Token, **options: Any):
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="termgate-session", daemon=True)
        self._thread.start()

        async def make() -> AsyncSession:
            return await AsyncSession(url, token, **options).connect()

        try:
            self._s = self._call(make())
        except BaseException:
            self._stop()
            raise

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def _stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def reconnects(self) -> int:
        return self._s.reconnects

    def start(self, command: Optional[str] = None, args: Optional[List[str]] = None, **options: Any) -> "Execution":
        return Execution(self, self._call(self._s.start(command, args, **options)))

    def attach(self, id: str, *, after: int = 0, incarnation: str = "") -> "Execution":
        return Execution(self, self._call(self._s.attach(id, after=after, incarnation=incarnation)))

    def exec(self, **body: Any) -> Dict[str, Any]:
        return self._call(self._s.exec(**body))

    def drop(self) -> None:
        """drop breaks the connection as a network failure would (tests)."""
        self._loop.call_soon_threadsafe(self._s.drop)

    def close(self) -> None:
        self._call(self._s.aclose())
        self._stop()


class Execution:
    """Execution is AsyncExecution, blocking."""

    def __init__(self, session: Session, ex: AsyncExecution):
        self._session = session
        self._ex = ex

    @property
    def id(self) -> str:
        return self._ex.id

    @property
    def incarnation(self) -> str:
        return self._ex.incarnation

    @property
    def last_seq(self) -> int:
        return self._ex.last_seq

    @property
    def input_offset(self) -> int:
        return self._ex.input_offset

    def events(self) -> Iterator[AnyEvent]:
        agen = self._ex.events()
        while True:
            try:
                ev = self._session._call(agen.__anext__())
            except StopAsyncIteration:
                return
            yield ev

    def wait(self) -> Exit:
        return self._session._call(self._ex.wait())

    def write(self, data: Union[bytes, str]) -> None:
        self._session._call(self._ex.write(data))

    def close_stdin(self) -> None:
        self._session._call(self._ex.close_stdin())

    def resize(self, rows: int, cols: int) -> None:
        self._session._call(self._ex.resize(rows, cols))

    def signal(self, name: str) -> None:
        self._session._call(self._ex.signal(name))

    def cancel(self) -> None:
        self._session._call(self._ex.cancel())

    def detach(self) -> None:
        self._session._call(self._ex.detach())
