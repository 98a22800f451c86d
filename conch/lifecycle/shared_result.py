"""One answer shared by every caller for a while: deep health's evaluation, a model's readiness.

Probes come in floods (a load balancer, an orchestrator, a dashboard each polling), and what they ask
costs real work (an inference per model, a call into a model's process); sharing one answer keeps
the cost at one piece of work per lifetime, however many ask.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class SharedResult(Generic[T]):
    """At most one ``produce()`` in flight, its result reused for ``ttl_s`` seconds after it finished.

    Callers arriving meanwhile await the same task, shielded: a caller that gives up (a client that
    hangs up) does not cancel the evaluation the others wait for. A failure is not kept.
    """

    def __init__(
        self, produce: Callable[[], Awaitable[T]], ttl_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._produce = produce
        self._ttl_s = ttl_s
        self._clock = clock
        self._kept: tuple[float, T] | None = None
        self._running: asyncio.Future[T] | None = None

    async def get(self) -> T:
        if self._kept is not None and self._clock() - self._kept[0] < self._ttl_s:
            return self._kept[1]
        if self._running is None:
            self._running = asyncio.ensure_future(self._run())
        return await asyncio.shield(self._running)

    async def _run(self) -> T:
        try:
            result = await self._produce()
            self._kept = (self._clock(), result)
            return result
        finally:
            self._running = None
