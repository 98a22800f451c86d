"""How many of a stream's records may be inside the model at once.

A model whose queue is full refuses at once (``max_queue_size``, 503). A stream's records then wait
in the consumer, not in a retry loop: the window shrinks to the records the model holds when it
refuses, and grows by one with each answer, up to ``max_in_flight``. Retrying each refused record on
its own backoff instead, 64 records against a queue of 2 took minutes to get through (a few got in
per backoff round); with the window they go through as fast as the model answers.
"""

from __future__ import annotations

import asyncio


class ModelWindow:
    """An additive-increase, shrink-on-refusal limit on records inside the model."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.size = limit
        self.inside = 0
        self._changed = asyncio.Event()

    async def enter(self) -> None:
        """Wait for room in the window, then take it."""
        while self.inside >= self.size:
            self._changed.clear()
            await self._changed.wait()
        self.inside += 1

    def leave(self, refused: bool) -> None:
        """Give the room back; ``refused``: the model turned the record away for now."""
        self.inside -= 1
        self.size = max(1, self.inside) if refused else min(self.limit, self.size + 1)
        self._changed.set()
