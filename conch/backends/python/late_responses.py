"""Responses a Python model sends through its response sender rather than by returning them.

A decoupled model answers each request's stream any number of times, after ``execute`` returned; a
model that is not decoupled may still answer once through its sender, even before ``execute``
returns. This keeps, per request key, where such a response goes: a request's stream, a future the
batch is waiting on, or (when it came first) the response itself until it is asked for.
"""

from __future__ import annotations

import asyncio

import numpy as np

from conch.core.errors import ConchError
from conch.core.response_stream import ResponseStream

Outcome = dict[str, np.ndarray] | BaseException


class LateResponses:
    """The requests of one instance that are waiting for a sender's response."""

    def __init__(self) -> None:
        self._streams: dict[int, ResponseStream] = {}
        self._waiting: dict[int, asyncio.Future[Outcome]] = {}
        self._early: dict[int, Outcome] = {}

    def stream_to(self, key: int, stream: ResponseStream) -> None:
        """A decoupled request's responses go to ``stream``."""
        self._streams[key] = stream

    def returned(self, key: int) -> None:
        """``execute`` returned the request's response itself: nothing more will come for it."""
        self._streams.pop(key, None)

    async def sent(self, key: int) -> Outcome:
        """The one response a non-decoupled model sends through its sender for request ``key``."""
        if key in self._early:
            return self._early.pop(key)
        future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        self._waiting[key] = future
        return await future

    def arrived(self, key: int, answer: dict[str, np.ndarray] | ConchError | None, final: bool) -> None:
        """A response (None: the final flag alone) the model sent for request ``key``."""
        stream = self._streams.get(key)
        if stream is not None:
            if answer is not None:
                stream.put(answer)
            if final:
                self.end(key)
        elif answer is not None:
            waiting = self._waiting.pop(key, None)
            if waiting is None:
                self._early[key] = answer  # sent before execute returned
            elif not waiting.done():
                waiting.set_result(answer)

    def end(self, key: int, error: Exception | None = None) -> None:
        """Request ``key`` gets no more responses (after ``error``, when given)."""
        stream = self._streams.pop(key, None)
        if stream is not None:
            if error is not None:
                stream.put(error)
            stream.finish()

    def fail_all(self, error: ConchError) -> None:
        """The process is gone: every request still waiting gets ``error``."""
        for key in list(self._streams):
            self.end(key, error)
        for future in self._waiting.values():
            if not future.done():
                future.set_result(error)
        self._waiting.clear()
        self._early.clear()
