"""The sequence batcher's rules on a fake clock: slots, backlog, END, idle release, direct batches."""

from __future__ import annotations

import pytest

from conch.core.errors import InvalidArgumentError
from conch.scheduling.sequence_rules import (
    SequenceRequest,
    SequenceSlots,
    Slot,
    direct_batch,
    read_sequence,
    refuse_sequence_parameters,
)

MS = 1_000_000


def step(sequence_id: int | str, start: bool = False, end: bool = False, at: int = 0) -> SequenceRequest:
    return SequenceRequest(sequence_id, start, end, at)


def slots(instances: int = 2, per_instance: int = 2, idle_ms: int = 100) -> SequenceSlots:
    return SequenceSlots("acc", instances, per_instance, idle_ms * MS)


def where(slot: Slot | None) -> tuple[int, int] | None:
    return None if slot is None else (slot.instance, slot.index)


def test_new_sequences_spread_over_instances_then_wait_in_the_backlog() -> None:
    table = slots()
    placed = [where(table.admit(step(sid, start=True), 0)) for sid in (1, 2, 3, 4, 5)]
    assert placed == [(0, 0), (1, 0), (0, 1), (1, 1), None]
    assert table.backlog_size == 1


def test_later_requests_follow_their_sequence_in_order() -> None:
    table = slots()
    first = table.admit(step(7, start=True), 0)
    second = table.admit(step(7, at=1), 1)
    assert first is second and first is not None
    assert [r.enqueued_ns for r in first.queue] == [0, 1]
    assert table.ready(0) == [first]
    taken = table.take(first)
    assert taken.start and table.ready(0) == []  # one request of a sequence runs at a time
    table.finish(first, 2)
    assert table.ready(0) == [first]


def test_a_request_without_start_for_an_unknown_sequence_is_refused_with_tritons_words() -> None:
    table = slots()
    with pytest.raises(InvalidArgumentError) as refused:
        table.admit(step(42), 0)
    assert refused.value.message.startswith(
        "inference request for sequence 42 to model 'acc' must specify the START flag on the first "
        "request of the sequence"
    )
    with pytest.raises(InvalidArgumentError, match="sequence abc to model 'acc'"):
        table.admit(step("abc"), 0)


def test_integer_and_string_ids_are_different_sequences() -> None:
    table = slots()
    table.admit(step(1, start=True), 0)
    with pytest.raises(InvalidArgumentError, match="sequence 1 to model"):
        table.admit(step("1"), 0)


def test_end_forgets_the_id_and_frees_the_slot_once_it_ran() -> None:
    table = slots(instances=1, per_instance=1)
    slot = table.admit(step(1, start=True, end=True), 0)
    assert slot is not None
    with pytest.raises(InvalidArgumentError):
        table.admit(step(1), 1)
    assert table.admit(step(1, start=True), 1) is None  # a new sequence: the slot is still busy
    table.take(slot)
    table.finish(slot, 2)
    assert slot.owner == 1 and [r.start for r in slot.queue] == [True]


def test_the_backlog_takes_a_slot_as_it_frees_with_the_requests_it_collected() -> None:
    table = slots(instances=1, per_instance=1)
    slot = table.admit(step(1, start=True), 0)
    assert slot is not None
    assert table.admit(step(2, start=True, at=1), 1) is None
    assert table.admit(step(2, at=2), 2) is None  # continues in the backlog
    table.admit(step(1, end=True), 3)
    table.take(slot)
    table.finish(slot, 4)
    assert slot.owner is None and not slot.free  # END forgot the id; the slot waits for END to run
    table.take(slot)
    table.finish(slot, 5)
    assert slot.owner == 2 and [r.enqueued_ns for r in slot.queue] == [1, 2]
    assert table.backlog_size == 0
    assert table.admit(step(2, end=True), 6) is slot


def test_a_sequence_ended_while_in_the_backlog_runs_and_frees_its_slot() -> None:
    table = slots(instances=1, per_instance=1)
    slot = table.admit(step(1, start=True, end=True), 0)
    assert slot is not None
    table.admit(step(2, start=True, end=True), 1)
    table.take(slot)
    table.finish(slot, 2)
    assert slot.owner is None and len(slot.queue) == 1
    with pytest.raises(InvalidArgumentError):
        table.admit(step(2), 3)
    table.take(slot)
    table.finish(slot, 4)
    assert slot.free


def test_idle_sequences_are_released_after_the_idle_time_since_their_last_answer() -> None:
    table = slots(instances=1, per_instance=2, idle_ms=100)
    slot = table.admit(step(1, start=True), 0)
    assert slot is not None
    table.take(slot)
    assert table.next_idle_at() is None  # running: not idle
    assert table.release_idle(500 * MS) == []
    table.finish(slot, 10 * MS)
    assert table.next_idle_at() == 110 * MS
    assert table.release_idle(109 * MS) == []
    assert table.release_idle(110 * MS) == [1]
    assert slot.free and table.next_idle_at() is None
    with pytest.raises(InvalidArgumentError, match="released after 100000 us"):
        table.admit(step(1), 111 * MS)


def test_a_released_slot_goes_to_the_backlog() -> None:
    table = slots(instances=1, per_instance=1, idle_ms=100)
    slot = table.admit(step(1, start=True), 0)
    assert slot is not None
    table.take(slot)
    table.finish(slot, 0)
    assert table.admit(step(2, start=True), 50 * MS) is None
    assert table.release_idle(100 * MS) == [1]
    assert slot.owner == 2 and len(slot.queue) == 1


def test_a_new_request_keeps_a_sequence_alive() -> None:
    table = slots(instances=1, per_instance=1, idle_ms=100)
    slot = table.admit(step(1, start=True), 0)
    assert slot is not None
    table.take(slot)
    table.finish(slot, 0)
    table.admit(step(1), 90 * MS)
    assert table.release_idle(150 * MS) == []  # queued: not idle


def test_drain_returns_every_waiting_request() -> None:
    table = slots(instances=1, per_instance=1)
    table.admit(step(1, start=True), 0)
    table.admit(step(2, start=True), 0)
    table.admit(step(2), 0)
    assert len(list(table.drain())) == 3


def ready_slots(table: SequenceSlots, sequences: list[tuple[int, bool]]) -> list[Slot]:
    for sequence_id, start in sequences:
        table.admit(step(sequence_id, start=start), 0)
    return table.ready(0)


def test_direct_batches_fill_empty_slots_with_not_ready_rows() -> None:
    table = slots(instances=1, per_instance=4)
    for sid in (1, 2, 3):
        table.admit(step(sid, start=True), 0)
    first = table.slots[0]
    table.take(first)
    table.finish(first, 0)  # slot 0 has nothing to send now
    batch, wake_at = direct_batch(table.ready(0), 0, 0.0, 4, lambda s: "same", 0)
    assert [where(s) for s in batch] == [None, (0, 1), (0, 2)]
    assert wake_at is None


def test_direct_batches_send_mismatched_shapes_as_not_ready_rows() -> None:
    table = slots(instances=1, per_instance=3)
    ready = ready_slots(table, [(1, True), (2, True), (3, True)])
    batch, _ = direct_batch(ready, 0, 0.0, 3, lambda s: s.index == 1, 0)
    assert [where(s) for s in batch] == [(0, 0), None, (0, 2)]


def test_direct_batches_wait_for_slot_utilization_up_to_the_delay() -> None:
    table = slots(instances=1, per_instance=4)
    ready = ready_slots(table, [(1, True)])
    assert direct_batch(ready, 10 * MS, 0.5, 4, lambda s: 0, 5 * MS) == ([], 10 * MS)
    batch, _ = direct_batch(ready, 10 * MS, 0.5, 4, lambda s: 0, 10 * MS)
    assert [where(s) for s in batch] == [(0, 0)]
    ready = ready_slots(table, [(2, True)])
    batch, _ = direct_batch(ready, 10 * MS, 0.5, 4, lambda s: 0, 0)
    assert len(batch) == 2  # half the slots hold a request: no wait


def test_nothing_ready_means_no_batch() -> None:
    assert direct_batch([], 0, 0.0, 4, lambda s: 0, 0) == ([], None)


@pytest.mark.parametrize(
    ("parameters", "expected"),
    [
        ({}, (None, False, False)),
        ({"sequence_id": 0}, (None, False, False)),
        ({"sequence_id": ""}, (None, False, False)),
        ({"sequence_id": 5, "sequence_start": True}, (5, True, False)),
        ({"sequence_id": 2**64 - 1, "sequence_end": True}, (2**64 - 1, False, True)),
        ({"sequence_id": "user-7", "sequence_start": True, "sequence_end": True}, ("user-7", True, True)),
    ],
)
def test_read_sequence(parameters: dict[str, object], expected: tuple[object, bool, bool]) -> None:
    assert read_sequence(parameters, "acc") == expected


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({"sequence_id": -1}, "unsigned 64-bit integer or a string"),
        ({"sequence_id": 2**64}, "unsigned 64-bit integer or a string"),
        ({"sequence_id": True}, "unsigned 64-bit integer or a string"),
        ({"sequence_id": 1.5}, "unsigned 64-bit integer or a string"),
        ({"sequence_id": "x" * 129}, "string correlation ID cannot be longer than 128 characters"),
        ({"sequence_id": 1, "sequence_start": "yes"}, "'sequence_start' must be a boolean"),
        ({"sequence_id": 1, "sequence_end": 1}, "'sequence_end' must be a boolean"),
    ],
)
def test_read_sequence_refuses(parameters: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        read_sequence(parameters, "acc")


def test_a_model_without_sequence_batching_refuses_a_correlation_id() -> None:
    refuse_sequence_parameters({"sequence_id": 0}, "plain")  # 0 is "no id"
    with pytest.raises(InvalidArgumentError, match="model 'plain': the model has no sequence batcher"):
        refuse_sequence_parameters({"sequence_id": 3, "sequence_start": True}, "plain")
