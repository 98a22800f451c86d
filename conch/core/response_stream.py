"""The responses of one request to a decoupled model: zero or more, then the end.

A decoupled model (``model_transaction_policy { decoupled: true }``) answers through a response
sender, as often as it likes and after ``execute`` has returned. The backend puts each answer here;
the frontend that streams (gRPC ``ModelStreamInfer``, HTTP ``generate_stream``) reads them in order.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import numpy as np

Outputs = dict[str, np.ndarray]
_END = object()


class ResponseStream:
    """An ordered queue of responses, each outputs or an error, closed by :meth:`finish`.

    An error is one response like the others (a decoupled model may send an error and go on); the
    backend finishes the stream when the model sends its final flag or its process is gone.
    """

    def __init__(self) -> None:
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self.finished = False

    def put(self, outputs: Outputs | Exception) -> None:
        if not self.finished:
            self._queue.put_nowait(outputs)

    def finish(self) -> None:
        if not self.finished:
            self.finished = True
            self._queue.put_nowait(_END)

    async def __aiter__(self) -> AsyncIterator[Outputs | Exception]:
        while True:
            item = await self._queue.get()
            if item is _END:
                return
            yield item
