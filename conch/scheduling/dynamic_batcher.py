"""The dynamic batcher's event-loop side: it waits for an idle instance, asks the
:class:`BatchQueue` what to send, and runs the batch.

Waiting for the instance *before* forming a batch is what makes batches grow under load: while every
instance computes, requests accumulate, and the next batch takes them all. With one event loop
reading requests and sending answers, some of them are still on their way through the frontend when
the instance frees, so the batcher first gives the loop a few turns (:data:`TURNS_BEFORE_A_BATCH`, more
for a model whose executions are long: :func:`turns_before_a_batch`), fewer once every client that
has lately been waiting on the server is queued.

A batch runs in a task of its own, so the batching task can form the next one for another instance.
For a single instance fast enough to run on the event loop (``InstancePool.always_inline``), the
batching task runs it itself: a task would only add a turn of the loop (+13% tiny requests/s at 32
HTTP clients). Its turn before a batch is formed stays: it is when the loop reads the requests that
arrived meanwhile.

Inputs of a batch are concatenated once (one ``np.concatenate`` per input); outputs are split back as
views. If a batch of several requests fails, each request is run again alone, so one bad request
fails only itself.
"""

from __future__ import annotations

import asyncio
import logging
import time
import types
from collections.abc import Callable, Generator
from typing import Any

import numpy as np

from conch.core.errors import UnavailableError
from conch.observability import tracing
from conch.observability.statistics import ModelStatistics
from conch.scheduling.batch_queue import BatchingSettings, BatchQueue, PendingRequest
from conch.scheduling.instance_pool import INLINE_ALONE_BELOW_NS, InstancePool, ModelInstance
from conch.scheduling.scheduler import Outcome, RequestListInstance, ScheduledRequest
from conch.scheduling.shared_turns import LineWaits, turns_of

log = logging.getLogger(__name__)

#: Turns of the event loop the batcher gives, once it has an instance and other requests are in the
#: server, before it forms the batch: the answers of the batch just computed go out and the requests
#: that arrived meanwhile are read, so the next batch takes them instead of leaving them for the one
#: after. Each turn runs what was ready; an idle loop turns in a few microseconds. At 32 gRPC clients
#: on ``mlp`` (interleaved runs): 2,277 to 2,321 requests/s with none, 2,320 to 2,522 with 3, 2,553
#: to 2,770 with 16, 2,596 to 2,781 with 40; batches of 4 requests or fewer fell from about 800 to
#: about 250 per run. Waiting a fixed time instead (200 or 500 us), or until a turn came back at once,
#: did no better than 3 turns.
TURNS_BEFORE_A_BATCH = 40
#: Turns for a model whose executions average more than :data:`LONG_EXECUTION_NS`. Under such a model the
#: answers of a batch take longer to come back as requests than 40 turns last, and a request that misses
#: its batch waits a whole execution for the next. When the loop has nothing else to do the extra turns
#: cost their own time, about 0.16 ms for 200 (8% of a 2 ms execution). At 32 HTTP binary clients on
#: ``huge`` (executions of ~10 ms) this rule served 1.05x [1.03-1.17] the requests of 40 turns for
#: every model; on ``tiny`` (33 us) 200 turns lost 0.93x, so short models keep 40.
LONG_EXECUTION_TURNS = 200
#: Executions longer than this on average (the pool's moving average) get :data:`LONG_EXECUTION_TURNS`.
#: It is the pool's starting estimate, compared strictly, so a model starts with the short wait and
#: takes the long one once its executions are measured above it.
LONG_EXECUTION_NS = INLINE_ALONE_BELOW_NS


def turns_before_a_batch(average_execution_ns: float) -> int:
    """How many turns of the loop the batcher gives before it forms a batch, by how long the model's
    executions take: the longer an execution, the more a request that misses its batch pays."""
    return LONG_EXECUTION_TURNS if average_execution_ns > LONG_EXECUTION_NS else TURNS_BEFORE_A_BATCH


class DynamicBatcher:
    """Triton's dynamic batcher for one model version."""

    def __init__(
        self,
        settings: BatchingSettings,
        pool: InstancePool,
        statistics: ModelStatistics,
        clock: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        self._queue = BatchQueue(settings)
        self._settings = settings
        self._pool = pool
        self._statistics = statistics
        self._clock = clock
        self._wakeup: asyncio.Future[None] | None = None
        #: The timer for when the batcher must look again (:meth:`_arm`), and that moment (clock ns).
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: int | None = None
        #: The event loop of the first request; the batching task runs there.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_task: asyncio.Task[None] | None = None
        self._running: set[asyncio.Task[None]] = set()
        self._in_line: set[asyncio.Task[Any]] = set()  # waiting for a turn (shared_turns)
        self._line_waits = LineWaits()
        self._finished: dict[int, tuple[PendingRequest, Outcome]] = {}
        self._next_release = 0
        self._outstanding = 0  # requests between schedule() and their answer, for BatchQueue.add

    async def schedule(self, request: ScheduledRequest) -> dict[str, np.ndarray]:
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
            self._loop_task = loop.create_task(self._form_batches(), name="conch-batcher")
        future: asyncio.Future[dict[str, np.ndarray]] = loop.create_future()
        overlapping = self._outstanding > 0
        self._outstanding += 1
        now = self._clock()
        waits = self._line_waits
        mark = waits.total(now) if waits.used else 0
        try:
            self._queue.add(request, now, future, overlapping, self._outstanding)
            wakeup = self._wakeup
            if wakeup is not None and not wakeup.done():
                wakeup.set_result(None)
            return await future
        finally:
            self._outstanding -= 1
            if waits.used:
                request.line_wait_ns = waits.total(self._clock()) - mark

    def close(self) -> None:
        """Stop forming batches; requests still queued are answered 503."""
        if self._loop_task is not None:
            self._loop_task.cancel()
        if self._timer is not None:
            self._timer.cancel()
        for waiting in self._in_line:  # batches still in a release's line for a turn
            waiting.cancel()
        for pending in self._queue.drain():
            self._finish(pending, UnavailableError("the model is unloading"))
        self._pool.close()

    async def _form_batches(self) -> None:
        while True:
            instance = await self._pool.acquire()
            try:
                if self._outstanding > 1:
                    await self._turns_for_company(turns_before_a_batch(self._pool.average_execution_ns))
                batch = await self._next_batch()
            except BaseException:
                self._pool.release(instance)
                raise
            if self._pool.always_inline:
                # The execution holds the loop either way; a task of its own would only add a turn.
                await self._execute(instance, batch)
                continue
            task = asyncio.create_task(self._execute(instance, batch))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _turns_for_company(self, turns: int) -> None:
        """Up to ``turns`` turns of the loop, fewer once every client is here (``BatchQueue.all_here``).

        Why stop early: each turn costs the loop a poll of its sockets (``epoll_wait``), and at 32
        clients on ``tiny`` the 40 turns were 1.25 polls a request, where the last of the clients'
        requests had arrived a few turns in. Stopping then: 53.1 -> 51.9 us of server CPU a request,
        18,794 -> 19,273 requests/s (6 alternating rounds of ``bench.grpc_cpu_ab --protocol
        http_json``, 2-core VM), batches still of 31.9 requests.

        While a release's versions take turns (:mod:`conch.scheduling.shared_turns`), the wait also
        ends one turn after another execution took a turn in the line. Without that, the version
        whose clients were all queued stopped early and computed again and again within the other's
        200 turns; the other's clients piled up behind it, so it stopped early less and less. At 50%
        without shadow copies, two identical versions then answered at P95s 0.34 to 0.54 times apart
        for a whole step, and 0.82 to 1.23 with copies; with this rule, 0.88 to 0.98 and 0.92 to
        1.02, each version's clients at 15 to 20 ms (``python -m bench.release_windows``).
        """
        queue = self._queue
        line = turns_of(self._pool.model)
        given = 0 if line is None else line.given
        for _ in range(turns):
            if queue.all_here(self._outstanding):
                return
            if line is not None and line.given != given:
                await _one_turn()  # the requests that came during that execution are read
                return
            await _one_turn()

    async def _next_batch(self) -> list[PendingRequest]:
        while True:
            now = self._clock()
            for pending in self._queue.expire(now):
                self._finish(pending, UnavailableError("the request timed out in the queue"))
            batch, wake_at = self._queue.next_batch(now, self._outstanding)
            if batch:
                return batch
            await self._sleep(wake_at, now)

    async def _sleep(self, wake_at: int | None, now: int) -> None:
        """Until a request arrives or the clock reaches ``wake_at`` (None: no time limit): a bare
        future and the batcher's one timer, no task."""
        self._arm(wake_at, now)
        assert self._loop is not None
        self._wakeup = self._loop.create_future()
        try:
            await self._wakeup
        finally:
            self._wakeup = None

    def _arm(self, wake_at: int | None, now: int) -> None:
        """Sets the timer to ring at ``wake_at``, keeping the one already set for that moment.

        Why: while a batch gathers, each arriving request wakes the batcher, which finds the batch
        not yet due and sleeps again until the same moment (the oldest request's queue delay). Behind
        ``--proxies``, whose requests arrive a few per turn of the loop, that was about one sleep
        a request, and a new timer with the old one cancelled each time (``call_later`` and
        ``cancel``: 1.6 us). A timer that rings when nobody sleeps wakes nothing (:meth:`_wake`).
        """
        if wake_at == self._timer_at and self._timer is not None:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = wake_at
        if wake_at is None:
            self._timer = None
            return
        assert self._loop is not None
        self._timer = self._loop.call_later(max(wake_at - now, 0) / 1e9, self._ring)

    def _ring(self) -> None:
        self._timer = self._timer_at = None
        self._wake()

    def _wake(self) -> None:
        if self._wakeup is not None and not self._wakeup.done():
            self._wakeup.set_result(None)

    async def _execute(self, instance: Any, batch: list[PendingRequest]) -> None:
        turns = turns_of(self._pool.model)
        if turns is not None:
            waiting = asyncio.current_task()
            assert waiting is not None  # a batch always executes in a task of the batcher's loop
            self._in_line.add(waiting)
            self._line_waits.begin(self._clock())
            try:
                await turns.take(self._pool.count)
            except asyncio.CancelledError:
                self._pool.release(instance)
                for pending in batch:
                    self._finish(pending, UnavailableError("the model is unloading"))
                raise
            finally:
                self._line_waits.end(self._clock())
                self._in_line.discard(waiting)
        try:
            await self._execute_turn(instance, batch)
        finally:
            if turns is not None:
                turns.give()

    async def _execute_turn(self, instance: Any, batch: list[PendingRequest]) -> None:
        dispatched = self._clock()
        for pending in batch:
            pending.request.queue_ns = dispatched - pending.enqueued_ns
        traced = tracing.tracer is not None
        execution = tracing.start_execution([p.request for p in batch], dispatched) if traced else None
        try:
            if self._pool.takes_request_lists:
                await self._execute_requests(instance, batch)
                return
            if len(batch) == 1:
                self._finish(batch[0], await self._run_alone(instance, batch[0]))
                return
            try:
                outputs = await self._run(instance, batch)
            except Exception as exc:
                log.warning("a batch of %d requests failed (%s); running them one by one", len(batch), exc)
                for pending in batch:
                    self._finish(pending, await self._run_alone(instance, pending))
                return
            self._split(batch, outputs)
        except asyncio.CancelledError:
            for pending in batch:
                self._finish(pending, UnavailableError("the server is shutting down"))
            raise
        finally:
            self._pool.release(instance)
            if execution is not None:
                execution.end()

    def _split(self, batch: list[PendingRequest], outputs: dict[str, np.ndarray]) -> None:
        """Each request's rows of the batch's outputs, as views. With one output every request of the
        batch asked for it: no loop over names, and without ``preserve_ordering`` nothing to order."""
        start = 0
        if len(outputs) == 1 and not self._settings.preserve_ordering:
            for name, array in outputs.items():
                for pending in batch:
                    end = start + pending.request.rows
                    _resolve(pending, {name: array[start:end]})
                    start = end
            return
        for pending in batch:
            end = start + pending.request.rows
            self._finish(pending, {name: outputs[name][start:end] for name in pending.request.output_names})
            start = end

    async def _execute_requests(self, instance: RequestListInstance, batch: list[PendingRequest]) -> None:
        """The batch as its list of requests, each answered (or failed) on its own."""
        try:
            outcomes, timing = await instance.execute([p.request for p in batch])
        except Exception as exc:
            outcomes, timing = [exc] * len(batch), None
        if timing is not None:
            self._statistics.record_execution(sum(p.rows for p in batch), len(batch), timing)
            _ran(batch, timing.spent_ns)
        for pending, outcome in zip(batch, outcomes, strict=True):
            self._finish(pending, outcome)

    async def _run(self, instance: ModelInstance, batch: list[PendingRequest]) -> dict[str, np.ndarray]:
        first = batch[0].request
        if len(batch) == 1:
            inputs = first.inputs
        else:
            inputs = {name: np.concatenate([p.request.inputs[name] for p in batch]) for name in first.inputs}
        alone = len(batch) == 1 and first.alone
        outputs, timing = await self._pool.run(instance, inputs, _output_union(batch), inline=alone)
        self._statistics.record_execution(sum(p.rows for p in batch), len(batch), timing)
        _ran(batch, timing.spent_ns)
        return outputs

    async def _run_alone(self, instance: ModelInstance, pending: PendingRequest) -> Outcome:
        try:
            return await self._run(instance, [pending])
        except Exception as exc:
            return exc

    def _finish(self, pending: PendingRequest, outcome: Outcome) -> None:
        if not self._settings.preserve_ordering:
            _resolve(pending, outcome)
            return
        self._finished[pending.sequence] = (pending, outcome)
        while self._next_release in self._finished:
            _resolve(*self._finished.pop(self._next_release))
            self._next_release += 1


@types.coroutine
def _one_turn() -> Generator[None, None, None]:
    # A bare yield is what asyncio.sleep(0) does, without a coroutine of its own for every turn.
    yield


def _ran(batch: list[PendingRequest], spent_ns: int) -> None:
    """Each request of ``batch`` learns what its execution took (the release gate's compute check)."""
    for pending in batch:
        pending.request.execution_ns = spent_ns


def _resolve(pending: PendingRequest, outcome: Outcome) -> None:
    future: asyncio.Future[dict[str, np.ndarray]] = pending.ticket
    if future.done():
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


def _output_union(batch: list[PendingRequest]) -> list[str]:
    first = batch[0].request.output_names
    # Usually every request asks for the same outputs: comparing the lists is cheaper than merging.
    for pending in batch:
        if pending.request.output_names != first:
            break
    else:
        return list(first)
    names = dict.fromkeys(first)
    for pending in batch[1:]:
        names.update(dict.fromkeys(pending.request.output_names))
    return list(names)
