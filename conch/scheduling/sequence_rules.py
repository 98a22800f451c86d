"""The sequence batcher's rules: which slot a sequence owns, what runs next, when a sequence is idle.

No event loop and no clock here: every method that needs the time takes ``now`` in nanoseconds, so
slot assignment, the backlog, idle release and the ``direct`` strategy's batches are tested with a
fake clock (``tests/unit/scheduling/test_sequence_rules.py``); :mod:`conch.scheduling.sequence_batcher` drives
them.

Rules, from Triton's sequence batcher:

- Each instance has ``slots_per_instance`` slots: ``max_batch_size`` (at least 1) for ``direct``,
  ``max_candidate_sequences`` for ``oldest``. A request with START takes a free slot, spreading new
  sequences over instances first; with none free it waits in the backlog, and the first backlogged
  sequence takes the next slot that frees. Later requests of the sequence follow it to its slot, in
  the order they came, one at a time.
- A request without START for a sequence that holds no slot and is not in the backlog (never started,
  ended, or released) is refused with Triton's message. A START for a sequence that already runs
  continues in its slot (Triton logs a conflict and does the same).
- END frees the slot once that request has run; a new sequence of the same id is a new sequence.
- A sequence with nothing queued or running for ``max_sequence_idle_microseconds`` is released: its
  slot goes to the backlog or back to the free slots. (Triton counts from the sequence's last request;
  conch from its last answer, so a slow model never releases a sequence whose request it is running.)
- ``direct``: a batch takes the next request of every slot from 0 to the highest slot that has one;
  slots between with nothing to send (or a request whose shapes differ from the first one's) are
  sent as not-ready rows. With ``max_queue_delay_microseconds`` and ``minimum_slot_utilization``
  set, a batch waits for that share of the slots to have requests, at most that delay.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any

from conch.core.errors import InvalidArgumentError

SequenceId = int | str

#: Triton's limit on string correlation ids.
MAX_STRING_ID = 128
_UINT64_END = 1 << 64


@dataclass(eq=False)
class SequenceRequest:
    """A request of a sequence, waiting in its slot's queue or in the backlog."""

    sequence_id: SequenceId
    start: bool
    end: bool
    enqueued_ns: int
    payload: Any = None  # the driver's request and its answer's future; opaque here


@dataclass(eq=False)
class Slot:
    """One batch slot of one instance. ``owner`` is the sequence whose requests come here (None once
    it ended or was released); the slot is free when it has no owner, queue or running request."""

    instance: int
    index: int
    owner: SequenceId | None = None
    queue: deque[SequenceRequest] = field(default_factory=deque)
    running: bool = False
    active_ns: int = 0  # when the owner's last request arrived or was answered
    state: Any = None  # the driver's implicit state for the owner

    @property
    def free(self) -> bool:
        return self.owner is None and not self.queue and not self.running

    @property
    def waiting_for_owner(self) -> bool:
        """Owned, with nothing queued or running: the owner's idle time runs."""
        return self.owner is not None and not self.queue and not self.running


@dataclass(eq=False)
class _Backlog:
    sequence_id: SequenceId
    queue: deque[SequenceRequest]
    ended: bool = False


def read_sequence(parameters: dict[str, Any], model: str) -> tuple[SequenceId | None, bool, bool]:
    """The request's correlation id (None for 0 or empty, Triton's "no id") and START / END flags."""
    raw = parameters.get("sequence_id")
    sequence_id: SequenceId | None
    if raw is None or (isinstance(raw, int) and not isinstance(raw, bool) and raw == 0) or raw == "":
        sequence_id = None
    elif isinstance(raw, str):
        if len(raw) > MAX_STRING_ID:
            raise InvalidArgumentError(
                f"string correlation ID cannot be longer than {MAX_STRING_ID} characters; model '{model}' "
                f"got one of {len(raw)}"
            )
        sequence_id = raw
    elif isinstance(raw, int) and not isinstance(raw, bool) and 0 < raw < _UINT64_END:
        sequence_id = raw
    else:
        raise InvalidArgumentError(
            f"parameter 'sequence_id' must be an unsigned 64-bit integer or a string, got {raw!r}"
        )
    return sequence_id, _flag(parameters, "sequence_start"), _flag(parameters, "sequence_end")


def refuse_sequence_parameters(parameters: dict[str, Any], model: str) -> None:
    """A model without ``sequence_batching`` keeps no sequence: a correlation id sent to it is a 400."""
    sequence_id, _, _ = read_sequence(parameters, model)
    if sequence_id is not None:
        raise InvalidArgumentError(
            f"inference request for sequence {sequence_id} to model '{model}': the model has no "
            "sequence batcher, so it keeps no sequence; send the request without sequence_id, "
            "sequence_start and sequence_end, or add sequence_batching to the model's config.pbtxt"
        )


def _flag(parameters: dict[str, Any], key: str) -> bool:
    value = parameters.get(key, False)
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"parameter '{key}' must be a boolean, got {value!r}")
    return value


class SequenceSlots:
    """The slots of every instance, the backlog, and which sequence is where."""

    def __init__(self, model: str, instances: int, slots_per_instance: int, idle_ns: int) -> None:
        self.model = model
        self.idle_ns = idle_ns
        self.slots = [Slot(i, s) for i in range(instances) for s in range(slots_per_instance)]
        self._slot_of: dict[SequenceId, Slot] = {}
        self._backlog: deque[_Backlog] = deque()
        self._backlog_of: dict[SequenceId, _Backlog] = {}

    def admit(self, request: SequenceRequest, now: int) -> Slot | None:
        """Queue ``request`` in its sequence's slot (returned) or in the backlog (None)."""
        sid = request.sequence_id
        slot = self._slot_of.get(sid)
        backlog = self._backlog_of.get(sid)
        if not request.start and slot is None and backlog is None:
            raise InvalidArgumentError(
                f"inference request for sequence {sid} to model '{self.model}' must specify the START "
                "flag on the first request of the sequence; this sequence was never started, has "
                f"ended, or was released after {self.idle_ns // 1000} us without requests "
                "(max_sequence_idle_microseconds): start it again with sequence_start"
            )
        if slot is None and backlog is None:
            slot = self._free_slot()
            if slot is None:
                backlog = _Backlog(sid, deque())
                self._backlog.append(backlog)
                self._backlog_of[sid] = backlog
            else:
                slot.owner = sid
                self._slot_of[sid] = slot
        if slot is not None:
            slot.queue.append(request)
            slot.active_ns = now
            if request.end:
                slot.owner = None
                del self._slot_of[sid]
            return slot
        assert backlog is not None
        backlog.queue.append(request)
        if request.end:
            backlog.ended = True
            del self._backlog_of[sid]
        return None

    def ready(self, instance: int) -> list[Slot]:
        """The instance's slots whose next request may run now, by slot index."""
        return [s for s in self.slots if s.instance == instance and s.queue and not s.running]

    def take(self, slot: Slot) -> SequenceRequest:
        """The slot's next request, which runs now; the slot waits for :meth:`finish`."""
        slot.running = True
        return slot.queue.popleft()

    def finish(self, slot: Slot, now: int) -> None:
        """The slot's running request was answered; a slot left free takes the backlog's first sequence."""
        slot.running = False
        slot.active_ns = now
        if slot.free:
            self._refill(slot)

    def release_idle(self, now: int) -> list[SequenceId]:
        """Release the sequences idle for ``idle_ns``; returns their ids."""
        released = []
        for slot in self.slots:
            if slot.waiting_for_owner and now - slot.active_ns >= self.idle_ns:
                assert slot.owner is not None
                released.append(slot.owner)
                del self._slot_of[slot.owner]
                slot.owner = None
                self._refill(slot)
        return released

    def next_idle_at(self) -> int | None:
        """When the next sequence becomes idle if nothing comes for it (ns), or None."""
        return min((s.active_ns + self.idle_ns for s in self.slots if s.waiting_for_owner), default=None)

    def drain(self) -> Iterator[SequenceRequest]:
        """Remove and yield every queued request (on close, so none waits forever)."""
        for slot in self.slots:
            while slot.queue:
                yield slot.queue.popleft()
        while self._backlog:
            yield from self._backlog.popleft().queue
        self._backlog_of.clear()

    @property
    def backlog_size(self) -> int:
        return len(self._backlog)

    def _free_slot(self) -> Slot | None:
        # Lowest slot index first, then lowest instance: new sequences spread over the instances.
        free = [s for s in self.slots if s.free]
        return min(free, key=lambda s: (s.index, s.instance), default=None)

    def _refill(self, slot: Slot) -> None:
        slot.state = None
        if not self._backlog:
            return
        backlog = self._backlog.popleft()
        slot.queue = backlog.queue
        if not backlog.ended:
            slot.owner = backlog.sequence_id
            self._slot_of[backlog.sequence_id] = slot
            del self._backlog_of[backlog.sequence_id]


def direct_batch(
    ready: list[Slot],
    max_queue_delay_ns: int,
    minimum_slot_utilization: float,
    slots_per_instance: int,
    shape_of: Callable[[Slot], Hashable],
    now: int,
) -> tuple[list[Slot | None], int | None]:
    """The ``direct`` strategy's next batch of one instance: a slot per row, None for a not-ready row.

    Empty when nothing is to be sent now; then the second value says when to look again (ns), if the
    batch waits for more slots to fill.
    """
    if not ready:
        return [], None
    if max_queue_delay_ns > 0 and minimum_slot_utilization > 0:
        oldest = min(slot.queue[0].enqueued_ns for slot in ready)
        send_at = oldest + max_queue_delay_ns
        if now < send_at and len(ready) / slots_per_instance < minimum_slot_utilization:
            return [], send_at
    shape = shape_of(ready[0])
    joining = {slot.index: slot for slot in ready if shape_of(slot) == shape}
    return [joining.get(index) for index in range(max(joining) + 1)], None
