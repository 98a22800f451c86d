"""Triton's sequence batcher for one model version: the event-loop side of
:mod:`conch.scheduling.sequence_rules`.

Each instance has a task of its own, because a sequence's slot belongs to one instance: the task
holds its instance for good, forms the next batch of that instance's slots (``direct``) or issues
each slot's next request to the instance's :class:`BatchQueue` and takes a batch from it
(``oldest``), runs it, keeps each sequence's state, and answers. A request of a sequence is issued
only once the previous one was answered, so its state input is always the state its predecessor left.

A reaper task releases sequences idle for ``max_sequence_idle_microseconds``. It sleeps until the
next sequence could become idle; it is woken only when it has nothing to wait for, because a later
answer can only push a deadline further away.

A failed execution fails every request in it; a sequence keeps the state it had before the failure,
so its client may retry the request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Hashable
from dataclasses import replace
from typing import Any

import numpy as np

from conch.core.errors import InvalidArgumentError, UnavailableError
from conch.core.types import ExecutionTiming
from conch.observability.statistics import ModelStatistics
from conch.scheduling.batch_queue import BatchingSettings, BatchQueue, shape_key
from conch.scheduling.instance_pool import InstancePool, ModelInstance
from conch.scheduling.scheduler import ScheduledRequest
from conch.scheduling.sequence_rules import (
    SequenceId,
    SequenceRequest,
    SequenceSlots,
    Slot,
    direct_batch,
    read_sequence,
)
from conch.scheduling.sequence_settings import OLDEST, SequenceSettings

log = logging.getLogger(__name__)

#: A request of a sequence as the driver keeps it: the scheduled request and the future it awaits.
Payload = tuple[ScheduledRequest, "asyncio.Future[dict[str, np.ndarray]]"]
#: One row of an execution: the model's inputs, and the slot and request it answers (None: not ready).
Row = tuple[dict[str, np.ndarray], tuple[Slot, SequenceRequest] | None]
Outcome = dict[str, np.ndarray] | BaseException


class _Alarm:
    """A sleep that :meth:`ring` ends early: a bare future and at most one timer."""

    def __init__(self) -> None:
        self._future: asyncio.Future[None] | None = None
        self.forever = False  # sleeping with no timer

    async def sleep(self, seconds: float | None) -> None:
        loop = asyncio.get_running_loop()
        self._future = loop.create_future()
        self.forever = seconds is None
        timer = loop.call_later(seconds, self.ring) if seconds is not None else None
        try:
            await self._future
        finally:
            self._future = None
            self.forever = False
            if timer is not None:
                timer.cancel()

    def ring(self) -> None:
        if self._future is not None and not self._future.done():
            self._future.set_result(None)


class SequenceBatcher:
    """Runs the requests of sequences on the slots of a model's instances."""

    def __init__(
        self,
        settings: SequenceSettings,
        pool: InstancePool,
        statistics: ModelStatistics,
        clock: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        self._settings = settings
        self._pool = pool
        self._statistics = statistics
        self._clock = clock
        self._slots = SequenceSlots(settings.model, pool.count, settings.slots_per_instance, settings.idle_ns)
        batching = BatchingSettings(
            max_batch_size=max(settings.max_batch_size, 1),
            max_queue_delay_ns=settings.max_queue_delay_ns,
            preferred_batch_sizes=settings.preferred_batch_sizes,
            adaptive_queue_delay=False,
        )
        self._queues = [BatchQueue(batching) for _ in range(pool.count)]
        self._alarms = [_Alarm() for _ in range(pool.count)]
        self._reaper_alarm = _Alarm()
        self._tasks: list[asyncio.Task[None]] = []

    async def schedule(self, request: ScheduledRequest) -> dict[str, np.ndarray]:
        model = self._settings.model
        if request.rows != 1:
            raise InvalidArgumentError(
                f"inference request to model '{model}' must specify batch-size 1 due to requirements of "
                f"sequence batcher; send each request of a sequence with one row, not {request.rows}"
            )
        sequence_id, start, end = read_sequence(request.parameters, model)
        if sequence_id is None:
            raise InvalidArgumentError(
                f"inference request to model '{model}' must specify a non-zero or non-empty correlation "
                "ID; send sequence_id (an unsigned integer or a string) with sequence_start on the first "
                "request of the sequence and sequence_end on the last"
            )
        self._check_corrid(sequence_id)
        if not self._tasks:
            self._start()
        future: asyncio.Future[dict[str, np.ndarray]] = asyncio.get_running_loop().create_future()
        now = self._clock()
        self._slots.admit(SequenceRequest(sequence_id, start, end, now, (request, future)), now)
        for alarm in self._alarms:
            alarm.ring()
        return await future

    def close(self) -> None:
        """Stop the instances' tasks; requests still queued are answered 503."""
        for task in self._tasks:
            task.cancel()
        unloading = UnavailableError("the model is unloading")
        for waiting in self._slots.drain():
            _resolve(waiting, unloading)
        for queue in self._queues:
            for pending in queue.drain():
                _resolve(pending.ticket[1], unloading)
        self._pool.close()

    def _start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._serve(index), name=f"conch-sequences-{index}")
            for index in range(self._pool.count)
        ]
        self._tasks.append(asyncio.create_task(self._reap(), name="conch-sequence-reaper"))

    def _check_corrid(self, sequence_id: SequenceId) -> None:
        corrid = self._settings.corrid
        if corrid is None:
            return
        wanted = "STRING" if corrid.dtype.kind == "O" else corrid.dtype.name.upper()
        got = "STRING" if isinstance(sequence_id, str) else "UINT64"
        fits = (wanted == "STRING") == (got == "STRING")
        if fits and isinstance(sequence_id, int) and sequence_id > np.iinfo(corrid.dtype).max:
            raise InvalidArgumentError(
                f"correlation ID {sequence_id} does not fit control '{corrid.name}' of model "
                f"'{self._settings.model}', a {wanted}; use ids up to {np.iinfo(corrid.dtype).max}"
            )
        if not fits:
            raise InvalidArgumentError(
                f"sequence batching control '{corrid.name}' data-type is '{got}', but model "
                f"'{self._settings.model}' expects '{wanted}'; send sequence_id as "
                + ("a string" if wanted == "STRING" else "an unsigned integer")
            )

    async def _serve(self, index: int) -> None:
        instance = await self._pool.acquire()
        oldest = self._settings.strategy == OLDEST
        while True:
            now = self._clock()
            if oldest:
                rows, wake_at = self._oldest_rows(index, now)
            else:
                rows, wake_at = self._direct_rows(index, now)
            if not rows:
                await self._alarms[index].sleep(None if wake_at is None else max(wake_at - now, 0) / 1e9)
                continue
            await self._execute(instance, rows)

    def _direct_rows(self, index: int, now: int) -> tuple[list[Row], int | None]:
        settings = self._settings
        batch, wake_at = direct_batch(
            self._slots.ready(index),
            settings.max_queue_delay_ns,
            settings.minimum_slot_utilization,
            settings.slots_per_instance,
            self._shape_of,
            now,
        )
        taken = [(slot, self._slots.take(slot)) if slot is not None else None for slot in batch]
        rows: list[Row] = [(self._row_inputs(*t), t) if t is not None else ({}, None) for t in taken]
        like = next((inputs for inputs, t in rows if t is not None), {})
        filled = [(inputs if t is not None else settings.not_ready_inputs(like), t) for inputs, t in rows]
        return filled, wake_at

    def _oldest_rows(self, index: int, now: int) -> tuple[list[Row], int | None]:
        queue = self._queues[index]
        for slot in self._slots.ready(index):
            waiting = self._slots.take(slot)
            inputs = self._row_inputs(slot, waiting)
            queue.add(ScheduledRequest(inputs, [], 1), now, (slot, waiting))
        batch, wake_at = queue.next_batch(now)
        return [(pending.request.inputs, pending.ticket) for pending in batch], wake_at

    def _row_inputs(self, slot: Slot, waiting: SequenceRequest) -> dict[str, np.ndarray]:
        request: ScheduledRequest = waiting.payload[0]
        state = self._state_for(slot, waiting)
        return self._settings.row_inputs(
            request.inputs, waiting.sequence_id, waiting.start, waiting.end, state
        )

    def _shape_of(self, slot: Slot) -> Hashable:
        waiting = slot.queue[0]
        request: ScheduledRequest = waiting.payload[0]
        state = self._state_for(slot, waiting)
        return shape_key(request), tuple((name, a.shape) for name, a in sorted(state.items()))

    def _state_for(self, slot: Slot, waiting: SequenceRequest) -> dict[str, np.ndarray]:
        """The state inputs of ``waiting``: fresh on START, else what the sequence's last answer left."""
        if waiting.start or slot.state is None:
            return self._settings.initial_state()
        state: dict[str, np.ndarray] = slot.state
        return state

    async def _execute(self, instance: Any, rows: list[Row]) -> None:
        answered = [t for _, t in rows if t is not None]
        dispatched = self._clock()
        names: dict[str, None] = dict.fromkeys(self._settings.state_outputs)
        for _, waiting in answered:
            request: ScheduledRequest = waiting.payload[0]
            request.queue_ns = dispatched - waiting.enqueued_ns
            names.update(dict.fromkeys(request.output_names))
        try:
            if hasattr(instance, "execute"):
                outcomes, timing = await self._execute_requests(instance, rows, list(names))
            else:
                outcomes, timing = await self._run_tensors(instance, rows, list(names))
        except asyncio.CancelledError:
            for _, waiting in answered:
                _resolve(waiting.payload, UnavailableError("the server is shutting down"))
            raise
        if timing is not None:
            self._statistics.record_execution(len(answered), len(answered), timing)
        now = self._clock()
        for (slot, waiting), outcome in zip(answered, outcomes, strict=True):
            request = waiting.payload[0]
            if isinstance(outcome, BaseException):
                _resolve(waiting.payload, outcome)  # the sequence keeps the state it had
            else:
                slot.state = self._settings.next_state(outcome)
                _resolve(waiting.payload, {name: outcome[name] for name in request.output_names})
            self._slots.finish(slot, now)
        if self._reaper_alarm.forever:
            self._reaper_alarm.ring()

    async def _run_tensors(
        self, instance: ModelInstance, rows: list[Row], names: list[str]
    ) -> tuple[list[Outcome], ExecutionTiming | None]:
        """One execution over the rows' concatenated tensors; each answered row gets its slice."""
        answered = [(row, t) for row, (_, t) in enumerate(rows) if t is not None]
        alone = len(answered) == 1 and answered[0][1][1].payload[0].alone
        try:
            if self._settings.batching and len(rows) > 1:
                inputs = {name: np.concatenate([r[0][name] for r in rows]) for name in rows[0][0]}
            else:
                inputs = rows[0][0]
            outputs, timing = await self._pool.run(instance, inputs, names, inline=alone)
        except Exception as exc:
            return [exc] * len(answered), None
        if not self._settings.batching:
            return [outputs], timing
        return [
            {name: array[row : row + 1] for name, array in outputs.items()} for row, _ in answered
        ], timing

    @staticmethod
    async def _execute_requests(
        instance: Any, rows: list[Row], names: list[str]
    ) -> tuple[list[Outcome], ExecutionTiming | None]:
        """An instance that takes a list of requests (a Python model) gets the answered rows only, each
        with its controls and state, and its parameters (``sequence_id``, ``sequence_start``,
        ``sequence_end``) as the client sent them."""
        requests = [
            replace(t[1].payload[0], inputs=inputs, output_names=names) for inputs, t in rows if t is not None
        ]
        try:
            outcomes, timing = await instance.execute(requests)
        except Exception as exc:
            return [exc] * len(requests), None
        return list(outcomes), timing

    async def _reap(self) -> None:
        while True:
            now = self._clock()
            released = self._slots.release_idle(now)
            if released:
                log.info(
                    "model '%s': released %d idle sequence(s) %s after %d us without requests",
                    self._settings.model,
                    len(released),
                    released[:10],
                    self._settings.idle_ns // 1000,
                )
                for alarm in self._alarms:
                    alarm.ring()
            at = self._slots.next_idle_at()
            await self._reaper_alarm.sleep(None if at is None else max(at - now, 0) / 1e9)


def _resolve(payload: Any, outcome: dict[str, np.ndarray] | BaseException) -> None:
    if isinstance(payload, SequenceRequest):
        payload = payload.payload
    future: asyncio.Future[dict[str, np.ndarray]] = payload[1]
    if future.done():
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)
