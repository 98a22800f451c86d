"""The dynamic batcher's queues and its decision of what to send, with Triton's semantics.

This module has no event loop and no clock of its own: every method takes ``now`` in nanoseconds, so
the rules (delay, preferred sizes, max size, shape grouping, priorities, timeouts, queue limits) are
tested with a controllable clock.

Rules, from Triton's ``dynamic_batching``:

- A batch counts rows (the first dimension), up to ``max_batch_size``.
- Requests are taken in priority order (level 1 first), FIFO within a level; requests whose
  ``DELAY`` timeout expired come after the other requests of their level.
- A request whose inputs' non-batch shapes or datatypes differ from the batch's first request ends
  the batch: the pending batch is sent as it is. Requested outputs may differ: the batch computes
  their union.
- A batch is sent whole when it is full, when the next request cannot join it, or once its oldest
  request has waited ``max_queue_delay_microseconds``. Before that, a prefix whose rows make a
  preferred size is sent at once (the longest such prefix).
- conch's one addition, on by default: a batch does not wait for company that is not coming. When
  the recent batches (moving average) held a single request *and* the recent requests arrived while
  no other request of the model was in the server, a lone client would only pay the delay, so the
  batch is sent at once. As soon as requests overlap or queue up behind a busy instance, the delay
  applies as configured. (Batch sizes alone are not enough: under load, a model fast enough to run
  each request the moment it was read kept its batches single, and so kept sending at once, at 32
  gRPC clients on ``tiny`` 3,237 requests/s against 4,135/s with the delay.)
  ``parameters { key: "adaptive_queue_delay" value: { string_value: "false" } }`` restores Triton's
  fixed wait.
- And a batch does not wait for clients it already has. When every request of the model in the server
  is in the pending batch, and no more requests have been in the server at once in the recent batches,
  a set of clients each waiting on its answer (the usual client) has all sent: waiting longer could
  only catch a newcomer, so the batch goes at once. Without this, 4 such clients paid the whole delay
  on every batch (500 us on a 100 us model), and a batch of 4 was as slow as a lone request with
  the delay.
- A full queue (``max_queue_size``) refuses a request at once. A request past its timeout is
  rejected (``REJECT``) or moved behind the others (``DELAY``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

from conch.core.errors import InvalidArgumentError, UnavailableError
from conch.scheduling.scheduler import ScheduledRequest

REJECT = mc.ModelQueuePolicy.REJECT
DELAY = mc.ModelQueuePolicy.DELAY


@dataclass(frozen=True)
class QueuePolicy:
    """Triton's ``ModelQueuePolicy`` for one priority level."""

    timeout_action: int = REJECT
    default_timeout_us: int = 0
    allow_timeout_override: bool = False
    max_queue_size: int = 0

    @classmethod
    def from_config(cls, policy: mc.ModelQueuePolicy) -> QueuePolicy:
        return cls(
            timeout_action=policy.timeout_action,
            default_timeout_us=policy.default_timeout_microseconds,
            allow_timeout_override=policy.allow_timeout_override,
            max_queue_size=policy.max_queue_size,
        )


@dataclass(frozen=True)
class BatchingSettings:
    """The parts of ``max_batch_size`` and ``dynamic_batching`` the batcher uses."""

    max_batch_size: int
    max_queue_delay_ns: int = 0
    preferred_batch_sizes: frozenset[int] = frozenset()
    preserve_ordering: bool = False
    priority_levels: int = 0
    default_priority_level: int = 0
    policies: dict[int, QueuePolicy] = field(default_factory=dict)
    default_policy: QueuePolicy = QueuePolicy()
    adaptive_queue_delay: bool = True

    @classmethod
    def from_config(cls, config: mc.ModelConfig) -> BatchingSettings:
        batching = config.dynamic_batching
        levels = batching.priority_levels
        return cls(
            max_batch_size=max(config.max_batch_size, 1),
            max_queue_delay_ns=batching.max_queue_delay_microseconds * 1000,
            preferred_batch_sizes=frozenset(batching.preferred_batch_size),
            preserve_ordering=batching.preserve_ordering,
            priority_levels=levels,
            default_priority_level=(batching.default_priority_level or levels) if levels else 0,
            policies={
                level: QueuePolicy.from_config(policy)
                for level, policy in batching.priority_queue_policy.items()
            },
            default_policy=QueuePolicy.from_config(batching.default_queue_policy),
            adaptive_queue_delay=_flag(config, "adaptive_queue_delay", default=True),
        )

    def policy(self, level: int) -> QueuePolicy:
        return self.policies.get(level, self.default_policy)


@dataclass(eq=False, slots=True)
class PendingRequest:
    """A request waiting in the queue, with what batching needs to know about it."""

    request: ScheduledRequest
    enqueued_ns: int
    level: int = 0
    deadline_ns: int | None = None
    sequence: int = 0
    shape_key: tuple[Any, ...] = ()
    delayed: bool = False
    ticket: Any = None  # the driver's handle (an asyncio future); opaque here

    @property
    def rows(self) -> int:
        return self.request.rows


_SMOOTHING = 0.2  # weight of the newest batch in the moving average of requests per batch
_HISTORY = 4  # batches sent before the average is trusted
_LONE = 1.5  # below this many requests per batch on average, clients are taken to be alone
_OVERLAPPING = 0.5  # above this share of recent arrivals finding others in the server, they are not
_PEAK_HISTORY = 16  # batches over which the most requests in the server at once is remembered


def _flag(config: mc.ModelConfig, key: str, default: bool) -> bool:
    if key not in config.parameters:
        return default
    value = config.parameters[key].string_value.strip().lower()
    if value not in ("true", "false", "1", "0"):
        raise InvalidArgumentError(f"parameters '{key}' must be true or false, got '{value}'")
    return value in ("true", "1")


def shape_key(request: ScheduledRequest) -> tuple[Any, ...]:
    """What must be equal for two requests to share a batch: input names, dtypes, non-batch shapes.

    The dtype itself, not its ``str``: dtypes compare and hash as their ``str`` would for the V2
    datatypes, without building a string per input of every request (a single input skips the sort).
    """
    inputs = request.inputs
    if len(inputs) == 1:
        for name, a in inputs.items():
            return ((name, a.dtype, a.shape[1:]),)
    return tuple((name, a.dtype, a.shape[1:]) for name, a in sorted(inputs.items()))


class BatchQueue:
    """Pending requests by priority level, and the rule for what to send next."""

    def __init__(self, settings: BatchingSettings) -> None:
        self.settings = settings
        levels = range(1, settings.priority_levels + 1) if settings.priority_levels else [0]
        self._queues: dict[int, deque[PendingRequest]] = {level: deque() for level in levels}
        self._delayed: dict[int, deque[PendingRequest]] = {level: deque() for level in levels}
        # Read on every request: each level's policy once, and whether any request can have a deadline
        # (a timeout override may only shorten a default one), so that without one the queue is never
        # scanned for expired requests.
        self._policies = {level: settings.policy(level) for level in levels}
        self._deadlines_possible = any(p.default_timeout_us > 0 for p in self._policies.values())
        #: Priority order: level 1 first; within a level, on-time requests before delayed ones. The
        #: deques are never replaced, so the order is made once.
        self._lanes = [
            lane for level in sorted(levels) for lane in (self._queues[level], self._delayed[level])
        ]
        self._sequence = 0
        self._batches_sent = 0
        self._mean_batch_requests = 0.0
        self._mean_overlap = 0.0
        #: The most requests in the server at once while each recent batch formed, and since the last.
        self._recent_in_server: deque[int] = deque(maxlen=_PEAK_HISTORY)
        self._in_server_since_batch = 0

    def __len__(self) -> int:
        return sum(len(lane) for lane in self._lanes)

    def add(
        self,
        request: ScheduledRequest,
        now: int,
        ticket: Any = None,
        overlapping: bool = False,
        in_server: int = 0,
    ) -> PendingRequest:
        """Queue ``request``; a full queue is a 503 and an unknown priority a 400. ``overlapping``:
        another request of the model was in the server (queued, running or being answered) when this
        one arrived; ``in_server``: how many are, this one included."""
        self._mean_overlap += (overlapping - self._mean_overlap) * _SMOOTHING
        if in_server > self._in_server_since_batch:
            self._in_server_since_batch = in_server
        parameters = request.parameters
        level = self._level(parameters.get("priority", 0)) if self.settings.priority_levels else 0
        policy = self._policies[level]
        queue = self._queues[level]
        # As in Triton, delayed requests still occupy their level's queue.
        if policy.max_queue_size and len(queue) + len(self._delayed[level]) >= policy.max_queue_size:
            raise UnavailableError(
                f"the queue is full ({policy.max_queue_size} requests waiting); retry later"
            )
        deadline_ns = None
        timeout_us = policy.default_timeout_us
        if timeout_us > 0:
            override = parameters.get("timeout")
            # As in Triton, a request may shorten the default timeout, never lengthen or add one.
            if policy.allow_timeout_override and isinstance(override, int) and 0 < override < timeout_us:
                timeout_us = override
            deadline_ns = now + timeout_us * 1000
        pending = PendingRequest(
            request=request,
            enqueued_ns=now,
            level=level,
            deadline_ns=deadline_ns,
            sequence=self._sequence,
            shape_key=shape_key(request),
            ticket=ticket,
        )
        self._sequence += 1
        queue.append(pending)
        return pending

    def expire(self, now: int) -> list[PendingRequest]:
        """Remove and return requests past their REJECT timeout; move DELAY ones behind their level."""
        rejected: list[PendingRequest] = []
        if not self._deadlines_possible:
            return rejected
        for level, queue in self._queues.items():
            if not any(p.deadline_ns is not None and p.deadline_ns <= now for p in queue):
                continue
            kept: list[PendingRequest] = []
            for pending in queue:
                if pending.deadline_ns is None or pending.deadline_ns > now:
                    kept.append(pending)
                elif self._policies[level].timeout_action == DELAY:
                    pending.delayed = True
                    pending.deadline_ns = None
                    self._delayed[level].append(pending)
                else:
                    rejected.append(pending)
            queue.clear()  # in place: the lanes keep referring to this deque
            queue.extend(kept)
        return rejected

    def next_batch(self, now: int, in_server: int | None = None) -> tuple[list[PendingRequest], int | None]:
        """The batch to send now (possibly empty) and, if empty, when to look again (ns, or None).
        ``in_server``: how many requests of the model are between arrival and answer right now (None:
        unknown, and the batch never goes early for having every client)."""
        candidates = chain.from_iterable(self._lanes)
        head = next(candidates, None)
        if head is None:
            return [], None
        max_rows, key = self.settings.max_batch_size, head.shape_key
        rows, count, preferred_count, blocked = head.request.rows, 1, 0, False
        preferred = self.settings.preferred_batch_sizes
        if rows in preferred:
            preferred_count = 1
        for pending in candidates:
            more = pending.request.rows
            if rows + more > max_rows or pending.shape_key != key:
                blocked = True
                break
            rows += more
            count += 1
            if rows in preferred:
                preferred_count = count
        send_at = head.enqueued_ns + self.settings.max_queue_delay_ns
        if (
            rows >= max_rows
            or blocked
            or now >= send_at
            or self._company_unlikely()
            or self._every_client_here(count, in_server)
        ):
            return self._taken(count, in_server), None
        if preferred_count:
            return self._taken(preferred_count, in_server), None
        if not self._deadlines_possible:
            return [], send_at
        return [], min([send_at, *self._deadlines()])

    def _level(self, requested: Any) -> int:
        if not self.settings.priority_levels:
            return 0
        if not isinstance(requested, int) or isinstance(requested, bool) or requested < 0:
            raise InvalidArgumentError(
                f"priority must be an integer from 1 to {self.settings.priority_levels}"
            )
        if requested == 0:
            return self.settings.default_priority_level
        if requested > self.settings.priority_levels:
            raise InvalidArgumentError(
                f"priority {requested} is out of range; the model has {self.settings.priority_levels} levels"
            )
        return requested

    def _company_unlikely(self) -> bool:
        # Until a few batches have gone there is no history to judge by: wait, as configured.
        return (
            self.settings.adaptive_queue_delay
            and self._batches_sent >= _HISTORY
            and self._mean_batch_requests < _LONE
            and self._mean_overlap < _OVERLAPPING
        )

    def _every_client_here(self, count: int, in_server: int | None) -> bool:
        # Every request in the server is pending, and never more than now in the recent batches.
        return (
            self.settings.adaptive_queue_delay
            and in_server is not None
            and count == in_server
            and len(self._recent_in_server) >= _HISTORY
            and in_server >= max(self._recent_in_server)
        )

    def all_here(self, in_server: int) -> bool:
        """Every request in the server is queued, and no more have been in the server at once in the
        recent batches: clients that each wait on their answer have all sent, so the batcher's turns
        of the loop before a batch (:mod:`conch.scheduling.dynamic_batcher`) would bring no one."""
        return self._every_client_here(len(self), in_server)

    def _taken(self, count: int, in_server: int | None) -> list[PendingRequest]:
        if in_server is not None:
            self._recent_in_server.append(max(self._in_server_since_batch, in_server))
            self._in_server_since_batch = in_server
        return self._take(count)

    def drain(self) -> list[PendingRequest]:
        """Remove and return every pending request (on shutdown, so none waits forever)."""
        return self._take(len(self))

    def _take(self, count: int) -> list[PendingRequest]:
        taken: list[PendingRequest] = []
        for lane in self._lanes:
            while lane and len(taken) < count:
                taken.append(lane.popleft())
        if taken:
            self._batches_sent += 1
            self._mean_batch_requests += (len(taken) - self._mean_batch_requests) * _SMOOTHING
        return taken

    def _deadlines(self) -> list[int]:
        return [p.deadline_ns for q in self._queues.values() for p in q if p.deadline_ns is not None]
