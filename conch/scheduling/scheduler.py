"""What every scheduler takes and does: run validated requests on a model's instances.

:class:`DirectScheduler` runs each request as it comes (models without ``dynamic_batching``);
:mod:`conch.scheduling.dynamic_batcher` merges requests into batches.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from conch.core.response_stream import ResponseStream
from conch.core.types import ExecutionTiming
from conch.observability import tracing
from conch.observability.statistics import ModelStatistics
from conch.observability.tracing import RequestTrace
from conch.scheduling.instance_pool import InstancePool
from conch.scheduling.shared_turns import LineWaits, turns_of


class RequestsInFlight:
    """How many requests are inside the server (any model, any protocol) right now.

    Why: a request that is alone may run its model on the event loop thread instead of an instance's
    worker thread, saving the hop there and back (about 70 us measured at concurrency 1), because
    nothing else needs the loop meanwhile; and when the last one leaves, ``on_idle`` lets
    :mod:`conch.runtime.busy_poll` keep the loop polling.
    """

    def __init__(self) -> None:
        self.count = 0
        #: The most requests inside at once since the server was last empty (read by ``on_idle``).
        self.peak = 0
        self.on_idle: Callable[[], None] | None = None  # called when the last request leaves

    @property
    def alone(self) -> bool:
        return self.count <= 1

    def enter(self) -> None:
        self.count += 1
        if self.count > self.peak:
            self.peak = self.count

    def leave(self) -> None:
        self.count -= 1
        if self.count == 0:
            if self.on_idle is not None:
                self.on_idle()
            self.peak = 0


@dataclass(slots=True)
class ScheduledRequest:
    """A validated request on its way to an instance. ``queue_ns`` is set by the scheduler."""

    inputs: dict[str, np.ndarray]
    output_names: list[str]
    rows: int
    parameters: dict[str, Any] = field(default_factory=dict)
    queue_ns: int = 0
    #: Nanoseconds its version waited for the other version's executions while the request was in
    #: the scheduler (a release's shared line, :mod:`conch.scheduling.shared_turns`; 0 otherwise).
    line_wait_ns: int = 0
    #: Nanoseconds the execution that answered it took (inputs in, the model's run, outputs out): what
    #: its version's compute cost, apart from any queue (0 until it ran).
    execution_ns: int = 0
    in_flight: RequestsInFlight | None = None
    #: The client's request id (Python models read it with ``request_id()``).
    id: str = ""
    #: Where a decoupled model's responses go (None: the model answers once, as ``schedule`` returns).
    stream: ResponseStream | None = None
    #: The request's span while traced; its queue and execute spans hang from it.
    trace: RequestTrace | None = None

    def gate_times(self, seconds: float) -> tuple[float, float | None]:
        """What a release's gate times of this request, which took ``seconds`` in all: the part its
        version spent (less its waits in the shared line), and its execution (None: it never ran)."""
        execution = self.execution_ns / 1e9 if self.execution_ns else None
        return seconds - self.line_wait_ns / 1e9, execution

    @property
    def alone(self) -> bool:
        """No other request is in the server now (checked when the request runs, not when it came)."""
        return self.in_flight is not None and self.in_flight.alone


Outcome = dict[str, np.ndarray] | BaseException


class RequestListInstance(Protocol):
    """An instance that takes a batch as its list of requests, each answered on its own (Triton's
    Python backend: ``execute(requests)``), instead of one set of concatenated inputs."""

    async def execute(self, requests: list[ScheduledRequest]) -> tuple[list[Outcome], ExecutionTiming]: ...


class Scheduler(Protocol):
    """Runs requests on a model's instances and records executions in the model's statistics."""

    async def schedule(self, request: ScheduledRequest) -> dict[str, np.ndarray]: ...

    def close(self) -> None: ...


class DirectScheduler:
    """One execution per request, on the next idle instance."""

    def __init__(self, pool: InstancePool, statistics: ModelStatistics) -> None:
        self._pool = pool
        self._statistics = statistics
        self._line_waits = LineWaits()

    async def schedule(self, request: ScheduledRequest) -> dict[str, np.ndarray]:
        waited_from = time.perf_counter_ns()
        waits = self._line_waits
        mark = waits.total(waited_from) if waits.used else 0
        instance = await self._pool.acquire()
        turns = turns_of(self._pool.model)
        if turns is not None:
            waits.begin(time.perf_counter_ns())
            try:
                await turns.take(self._pool.count)
            except BaseException:
                self._pool.release(instance)
                raise
            finally:
                waits.end(time.perf_counter_ns())
        dispatched = time.perf_counter_ns()
        if waits.used:
            request.line_wait_ns = waits.total(dispatched) - mark
        request.queue_ns = dispatched - waited_from
        execution = None if tracing.tracer is None else tracing.start_execution([request], dispatched)
        try:
            if self._pool.takes_request_lists:
                outcomes, timing = await instance.execute([request])
            else:
                outputs, timing = await self._pool.run(
                    instance, request.inputs, request.output_names, inline=request.alone
                )
        finally:
            self._pool.release(instance)
            if turns is not None:
                turns.give()
            if execution is not None:
                execution.end()
        self._statistics.record_execution(request.rows, 1, timing)
        request.execution_ns = timing.spent_ns
        if self._pool.takes_request_lists:
            if isinstance(outcomes[0], BaseException):
                raise outcomes[0]
            return outcomes[0]
        return outputs

    def close(self) -> None:
        self._pool.close()
