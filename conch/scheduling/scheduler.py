"""What every scheduler takes and does: run validated requests on a model's instances.

:class:`DirectScheduler` runs each request as it comes (models without ``dynamic_batching``);
:mod:`conch.scheduling.dynamic_batcher` merges requests into batches.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from conch.observability.statistics import ModelStatistics
from conch.scheduling.instance_pool import InstancePool


@dataclass(slots=True)
class ScheduledRequest:
    """A validated request on its way to an instance. ``queue_ns`` is set by the scheduler."""

    inputs: dict[str, np.ndarray]
    output_names: list[str]
    rows: int
    parameters: dict[str, Any] = field(default_factory=dict)
    queue_ns: int = 0


class Scheduler(Protocol):
    """Runs requests on a model's instances and records executions in the model's statistics."""

    async def schedule(self, request: ScheduledRequest) -> dict[str, np.ndarray]: ...

    def close(self) -> None: ...


class DirectScheduler:
    """One execution per request, on the next idle instance."""

    def __init__(self, pool: InstancePool, statistics: ModelStatistics) -> None:
        self._pool = pool
        self._statistics = statistics

    async def schedule(self, request: ScheduledRequest) -> dict[str, np.ndarray]:
        waited_from = time.perf_counter_ns()
        instance = await self._pool.acquire()
        request.queue_ns = time.perf_counter_ns() - waited_from
        try:
            outputs, timing = await self._pool.run(instance, request.inputs, request.output_names)
        finally:
            self._pool.release(instance)
        self._statistics.record_execution(request.rows, 1, timing)
        return outputs

    def close(self) -> None:
        self._pool.close()
