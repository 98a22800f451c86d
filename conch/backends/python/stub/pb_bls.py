"""A BLS call in flight, as the model's side sees it: where its answers arrive (a queue a blocking
``exec`` waits on, or a future of the caller's event loop for ``async_exec``), and the iterator over a
decoupled callee's responses."""

from __future__ import annotations

import asyncio
import queue
from typing import Any


class _ResponseIterator:
    """The responses of a decoupled BLS call, as they arrive; ends after the final one."""

    def __init__(self, call: Any) -> None:
        self._call = call

    def __iter__(self) -> _ResponseIterator:
        return self

    def __next__(self) -> Any:
        response = self._call.next()
        if response is None:
            raise StopIteration
        return response

    def cancel(self) -> None:
        self._call.cancel()


class BlsCall:
    """One BLS call in flight: its responses arrive on a queue (None after the last), or, for an
    ``async_exec``, its one response on a future of the caller's event loop."""

    def __init__(self, decoupled: bool = False, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.decoupled = decoupled
        self.responses: queue.Queue[Any | None] = queue.Queue()
        self.loop = loop
        self.future: asyncio.Future[Any] | None = loop.create_future() if loop else None

    def put(self, response: Any | None) -> None:
        """Called from the reader thread as answers arrive."""
        if self.loop is not None and self.future is not None:
            if response is not None:
                self.loop.call_soon_threadsafe(_resolve, self.future, response)
            return
        self.responses.put(response)

    def get(self) -> Any:
        response = self.responses.get()
        assert response is not None
        return response

    def next(self) -> Any | None:
        return self.responses.get()

    def cancel(self) -> None:
        """conch does not cancel a BLS call in flight; its responses are dropped as they arrive."""


def _resolve(future: asyncio.Future[Any], response: Any) -> None:
    if not future.done():
        future.set_result(response)
