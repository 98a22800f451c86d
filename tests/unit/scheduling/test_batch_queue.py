"""The dynamic batcher's rules, driven by a clock the test controls: ``now`` is an integer of nanoseconds."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from conch.core.errors import InvalidArgumentError, UnavailableError
from conch.scheduling.batch_queue import (
    DELAY,
    REJECT,
    BatchingSettings,
    BatchQueue,
    PendingRequest,
    QueuePolicy,
    shape_key,
)
from conch.scheduling.scheduler import ScheduledRequest

US = 1_000  # nanoseconds in a microsecond


def settings(text: str) -> BatchingSettings:
    """Batching settings from the text of a ``config.pbtxt``."""
    return BatchingSettings.from_config(text_format.Parse(text, mc.ModelConfig()))


def scheduled(
    rows: int = 1,
    width: int = 4,
    dtype: type = np.float32,
    outputs: tuple[str, ...] = ("OUTPUT0",),
    **parameters: Any,
) -> ScheduledRequest:
    return ScheduledRequest(
        inputs={"INPUT0": np.zeros((rows, width), dtype=dtype)},
        output_names=list(outputs),
        rows=rows,
        parameters=parameters,
    )


def requests_of(batch: list[PendingRequest]) -> list[ScheduledRequest]:
    return [pending.request for pending in batch]


def test_from_config_maps_dynamic_batching() -> None:
    result = settings(
        """
        max_batch_size: 16
        dynamic_batching {
          preferred_batch_size: [ 4, 8 ]
          max_queue_delay_microseconds: 250
          preserve_ordering: true
          priority_levels: 3
          default_priority_level: 2
          default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 70 }
          priority_queue_policy {
            key: 1
            value: { max_queue_size: 5 allow_timeout_override: true default_timeout_microseconds: 9 }
          }
        }
        """
    )

    assert result.max_batch_size == 16
    assert result.max_queue_delay_ns == 250 * US
    assert result.preferred_batch_sizes == frozenset({4, 8})
    assert result.preserve_ordering is True
    assert (result.priority_levels, result.default_priority_level) == (3, 2)
    assert result.policy(1) == QueuePolicy(
        timeout_action=REJECT, default_timeout_us=9, allow_timeout_override=True, max_queue_size=5
    )
    assert result.policy(2) == result.policy(3) == QueuePolicy(timeout_action=DELAY, default_timeout_us=70)


def test_from_config_defaults() -> None:
    result = settings("max_batch_size: 4 dynamic_batching { priority_levels: 3 }")

    assert result.max_queue_delay_ns == 0
    assert result.preferred_batch_sizes == frozenset()
    assert result.preserve_ordering is False
    assert result.default_priority_level == 3, "without a default, requests get the lowest priority"
    assert result.policy(1) == QueuePolicy()


def test_nothing_is_sent_before_the_queue_delay() -> None:
    queue = BatchQueue(settings("max_batch_size: 8 dynamic_batching { max_queue_delay_microseconds: 100 }"))
    first, second = scheduled(), scheduled()
    queue.add(first, now=1_000)
    queue.add(second, now=50_000)

    assert queue.next_batch(1_000) == ([], 1_000 + 100 * US)
    assert queue.next_batch(100_999) == ([], 101_000), "the oldest request sets the deadline"

    batch, wake_at = queue.next_batch(101_000)

    assert requests_of(batch) == [first, second]
    assert wake_at is None
    assert len(queue) == 0
    assert queue.next_batch(10**12) == ([], None)


def test_without_a_queue_delay_requests_are_sent_at_once() -> None:
    queue = BatchQueue(settings("max_batch_size: 8 dynamic_batching { }"))
    first, second = scheduled(), scheduled()
    queue.add(first, now=0)
    queue.add(second, now=0)

    batch, _ = queue.next_batch(0)

    assert requests_of(batch) == [first, second]


def test_a_preferred_batch_size_is_sent_before_the_delay() -> None:
    queue = BatchQueue(
        settings(
            "max_batch_size: 8 dynamic_batching { preferred_batch_size: 3 "
            "max_queue_delay_microseconds: 1000 }"
        )
    )
    one, two = scheduled(rows=1), scheduled(rows=2)
    queue.add(one, now=0)

    assert queue.next_batch(10) == ([], 1000 * US), "one row is not a preferred size"

    queue.add(two, now=20)
    batch, _ = queue.next_batch(30)

    assert requests_of(batch) == [one, two]


def test_the_longest_preferred_prefix_is_sent() -> None:
    queue = BatchQueue(
        settings(
            "max_batch_size: 8 dynamic_batching { preferred_batch_size: [ 2, 4 ] "
            "max_queue_delay_microseconds: 1000 }"
        )
    )
    waiting = [scheduled() for _ in range(5)]
    for i, r in enumerate(waiting):
        queue.add(r, now=i)

    batch, _ = queue.next_batch(10)

    assert requests_of(batch) == waiting[:4]
    assert queue.next_batch(10) == ([], 4 + 1000 * US), "the fifth waits for its own delay"


def test_max_batch_size_counts_rows() -> None:
    queue = BatchQueue(settings("max_batch_size: 8 dynamic_batching { max_queue_delay_microseconds: 1000 }"))
    waiting = [scheduled(rows=3) for _ in range(4)]
    for r in waiting:
        queue.add(r, now=0)

    first, _ = queue.next_batch(0)

    assert requests_of(first) == waiting[:2], "a third request of 3 rows would make 9 > 8 rows"
    assert queue.next_batch(0) == ([], 1000 * US), "6 rows do not fill the batch: they wait"
    second, _ = queue.next_batch(1000 * US)
    assert requests_of(second) == waiting[2:]


def test_a_full_batch_is_sent_at_once() -> None:
    queue = BatchQueue(settings("max_batch_size: 4 dynamic_batching { max_queue_delay_microseconds: 1000 }"))
    two, other_two = scheduled(rows=2), scheduled(rows=2)
    queue.add(two, now=0)
    queue.add(other_two, now=0)

    batch, _ = queue.next_batch(0)

    assert requests_of(batch) == [two, other_two]


def test_a_request_that_would_overflow_waits_for_the_next_batch() -> None:
    queue = BatchQueue(settings("max_batch_size: 4 dynamic_batching { max_queue_delay_microseconds: 1000 }"))
    one, other_one, three = scheduled(rows=1), scheduled(rows=1), scheduled(rows=3)
    for r in (one, other_one, three):
        queue.add(r, now=0)

    first, _ = queue.next_batch(0)

    assert requests_of(first) == [one, other_one], "sent before the delay: it cannot grow any more"
    assert queue.next_batch(0) == ([], 1000 * US)
    second, _ = queue.next_batch(1000 * US)
    assert requests_of(second) == [three]


@pytest.mark.parametrize(
    "different",
    [
        pytest.param(scheduled(width=5), id="non-batch-dims"),
        pytest.param(scheduled(dtype=np.float64), id="dtype"),
    ],
)
def test_a_different_shape_ends_the_batch(different: ScheduledRequest) -> None:
    queue = BatchQueue(settings("max_batch_size: 8 dynamic_batching { max_queue_delay_microseconds: 1000 }"))
    a, b, later = scheduled(), scheduled(), scheduled()
    for r in (a, b, different, later):
        queue.add(r, now=0)

    first, _ = queue.next_batch(0)
    second, _ = queue.next_batch(0)

    assert requests_of(first) == [a, b], "the pending batch is sent as it is"
    assert requests_of(second) == [different], "it cannot join the request behind it either"
    assert queue.next_batch(0) == ([], 1000 * US)
    third, _ = queue.next_batch(1000 * US)
    assert requests_of(third) == [later]


def test_requests_asking_for_different_outputs_share_a_batch() -> None:
    queue = BatchQueue(settings("max_batch_size: 8 dynamic_batching { }"))
    first, second = scheduled(outputs=("OUTPUT0",)), scheduled(outputs=("OUTPUT1",))
    queue.add(first, now=0)
    queue.add(second, now=0)

    batch, _ = queue.next_batch(0)

    assert requests_of(batch) == [first, second]


def test_requests_with_different_row_counts_share_a_batch() -> None:
    assert shape_key(scheduled(rows=1)) == shape_key(scheduled(rows=5))
    queue = BatchQueue(settings("max_batch_size: 8 dynamic_batching { }"))
    one, five = scheduled(rows=1), scheduled(rows=5)
    queue.add(one, now=0)
    queue.add(five, now=0)

    batch, _ = queue.next_batch(0)

    assert requests_of(batch) == [one, five]


PRIORITIES = "max_batch_size: 1 dynamic_batching { priority_levels: 2 default_priority_level: 2 }"


def test_higher_priority_requests_go_first() -> None:
    queue = BatchQueue(settings(PRIORITIES))
    low = scheduled(priority=2)
    unset = scheduled()
    zero = scheduled(priority=0)
    high = scheduled(priority=1)
    for now, r in enumerate((low, unset, zero, high)):
        queue.add(r, now=now)

    sent = [requests_of(queue.next_batch(10)[0]) for _ in range(4)]

    assert sent == [[high], [low], [unset], [zero]], "level 1 first, then FIFO within level 2"


def test_the_default_priority_level_is_used_when_absent() -> None:
    queue = BatchQueue(settings(PRIORITIES))

    assert queue.add(scheduled(), now=0).level == 2
    assert queue.add(scheduled(priority=0), now=0).level == 2
    assert queue.add(scheduled(priority=1), now=0).level == 1


@pytest.mark.parametrize("priority", [3, -1, "1", 1.5, True])
def test_an_invalid_priority_is_refused(priority: Any) -> None:
    queue = BatchQueue(settings(PRIORITIES))

    with pytest.raises(InvalidArgumentError, match="priority"):
        queue.add(scheduled(priority=priority), now=0)
    assert len(queue) == 0


def test_priority_is_ignored_without_priority_levels() -> None:
    queue = BatchQueue(settings("max_batch_size: 1 dynamic_batching { }"))

    assert queue.add(scheduled(priority=7), now=0).level == 0


REJECT_AFTER_100US = """
max_batch_size: 8
dynamic_batching {
  max_queue_delay_microseconds: 1000
  default_queue_policy { timeout_action: REJECT default_timeout_microseconds: 100 %s }
}
"""


def test_a_request_past_its_timeout_is_rejected() -> None:
    queue = BatchQueue(settings(REJECT_AFTER_100US % ""))
    late = queue.add(scheduled(), now=0)

    assert queue.next_batch(0) == ([], 100 * US), "the batcher wakes up at the timeout, before the delay"

    kept = queue.add(scheduled(), now=50 * US)
    assert queue.expire(100 * US - 1) == []
    assert queue.expire(100 * US) == [late]
    assert len(queue) == 1
    assert queue.next_batch(100 * US) == ([], 150 * US)
    assert queue.expire(150 * US) == [kept]
    assert queue.next_batch(150 * US) == ([], None)


def test_allow_timeout_override_lets_a_request_shorten_its_timeout() -> None:
    queue = BatchQueue(settings(REJECT_AFTER_100US % "allow_timeout_override: true"))
    short = queue.add(scheduled(timeout=10), now=0)
    longer = queue.add(scheduled(timeout=500), now=0)

    assert queue.expire(10 * US) == [short]
    assert queue.expire(100 * US) == [longer], "a request cannot lengthen the default timeout"


def test_the_timeout_parameter_is_ignored_without_allow_timeout_override() -> None:
    queue = BatchQueue(settings(REJECT_AFTER_100US % ""))
    pending = queue.add(scheduled(timeout=10), now=0)

    assert queue.expire(10 * US) == []
    assert queue.expire(100 * US) == [pending]


def test_without_a_default_timeout_requests_never_expire() -> None:
    queue = BatchQueue(
        settings(
            "max_batch_size: 8 dynamic_batching { max_queue_delay_microseconds: 1000 "
            "default_queue_policy { allow_timeout_override: true } }"
        )
    )
    queue.add(scheduled(timeout=10), now=0)

    assert queue.expire(10**12) == []
    assert len(queue) == 1


DELAY_AFTER_100US = """
max_batch_size: 1
dynamic_batching {
  default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 100 %s }
}
"""


def test_a_delayed_request_moves_behind_the_others_and_is_still_sent() -> None:
    queue = BatchQueue(settings(DELAY_AFTER_100US % ""))
    early = scheduled()
    second, third = scheduled(), scheduled()
    queue.add(early, now=0)
    queue.add(second, now=50 * US)
    queue.add(third, now=50 * US)

    assert queue.expire(120 * US) == [], "DELAY never rejects"
    sent = [requests_of(queue.next_batch(120 * US)[0]) for _ in range(2)]
    assert sent == [[second], [third]]
    assert queue.expire(10**12) == [], "a delayed request has no timeout any more"
    batch, _ = queue.next_batch(10**12)
    assert requests_of(batch) == [early]
    assert batch[0].delayed


def test_a_full_queue_refuses_with_503() -> None:
    queue = BatchQueue(
        settings("max_batch_size: 1 dynamic_batching { default_queue_policy { max_queue_size: 2 } }")
    )
    queue.add(scheduled(), now=0)
    queue.add(scheduled(), now=0)

    with pytest.raises(UnavailableError) as refused:
        queue.add(scheduled(), now=0)

    assert refused.value.kind.http_status == 503
    assert len(queue) == 2
    queue.next_batch(0)
    queue.add(scheduled(), now=1)
    assert len(queue) == 2, "a sent request frees its place"


def test_max_queue_size_is_per_priority_level() -> None:
    queue = BatchQueue(
        settings(
            "max_batch_size: 1 dynamic_batching { priority_levels: 2 "
            "priority_queue_policy { key: 1 value: { max_queue_size: 1 } } }"
        )
    )
    queue.add(scheduled(priority=1), now=0)

    with pytest.raises(UnavailableError):
        queue.add(scheduled(priority=1), now=0)
    for _ in range(5):
        queue.add(scheduled(priority=2), now=0)
    assert len(queue) == 6


def test_delayed_requests_still_count_towards_max_queue_size() -> None:
    queue = BatchQueue(settings(DELAY_AFTER_100US % "max_queue_size: 2"))
    queue.add(scheduled(), now=0)
    queue.add(scheduled(), now=0)
    queue.expire(200 * US)

    with pytest.raises(UnavailableError):
        queue.add(scheduled(), now=200 * US)


def test_the_ticket_travels_with_the_request() -> None:
    queue = BatchQueue(settings("max_batch_size: 8 dynamic_batching { }"))
    ticket = object()
    queue.add(scheduled(), now=0, ticket=ticket)

    batch, _ = queue.next_batch(0)

    assert batch[0].ticket is ticket


ADAPTIVE = "max_batch_size: 8 dynamic_batching { max_queue_delay_microseconds: 500 }"


def sent_without_waiting(queue: BatchQueue, arrivals_us: list[int], overlapping: bool = False) -> list[bool]:
    """For each arrival (at its time, queue otherwise empty): was it sent at once? ``overlapping``:
    each arrived while another request was still being answered."""
    answers = []
    for at in arrivals_us:
        request = scheduled()
        queue.add(request, now=at * US, overlapping=overlapping)
        batch, _ = queue.next_batch(at * US)
        answers.append(requests_of(batch) == [request])
        if not batch:
            queue.next_batch((at + 500) * US)
    return answers


def test_a_lone_client_stops_paying_the_delay_once_its_batches_are_single() -> None:
    # One client, a request every 2 ms: nobody joins its batches.
    answers = sent_without_waiting(BatchQueue(settings(ADAPTIVE)), [2000 * i for i in range(12)])

    assert answers[:4] == [False] * 4, "with no history the configured delay applies"
    assert answers[-1] is True


def test_requests_that_overlap_others_keep_the_delay_even_when_their_batches_stay_single() -> None:
    # Under load, a model fast enough to answer each request as soon as it is read keeps its batches
    # single; judged by batch sizes alone, that looked like a lone client and batches never grew.
    answers = sent_without_waiting(
        BatchQueue(settings(ADAPTIVE)), [2000 * i for i in range(12)], overlapping=True
    )

    assert not any(answers)


def test_a_client_alone_again_stops_paying_the_delay() -> None:
    queue = BatchQueue(settings(ADAPTIVE))
    sent_without_waiting(queue, [2000 * i for i in range(12)], overlapping=True)

    answers = sent_without_waiting(queue, [30_000 + 2000 * i for i in range(12)])

    assert answers[0] is False, "one lone arrival does not outweigh the recent overlapping ones"
    assert answers[-1] is True


def test_once_requests_queue_up_the_delay_applies_again() -> None:
    queue = BatchQueue(settings(ADAPTIVE))
    sent_without_waiting(queue, [2000 * i for i in range(12)])
    for _ in range(5):  # a burst: five requests queued behind a busy instance go as one batch
        queue.add(scheduled(), now=30_000 * US)
    burst, _ = queue.next_batch(30_000 * US)
    assert len(burst) == 5

    queue.add(scheduled(), now=31_000 * US)
    batch, wake_at = queue.next_batch(31_000 * US)

    assert batch == []
    assert wake_at == 31_500 * US


def test_under_load_the_delay_applies_as_configured() -> None:
    queue = BatchQueue(settings(ADAPTIVE))
    for at in range(0, 140, 20):  # seven requests 20 us apart
        queue.add(scheduled(), now=at * US)

    batch, wake_at = queue.next_batch(120 * US)

    assert batch == []
    assert wake_at == 500 * US


def test_adaptive_queue_delay_can_be_turned_off() -> None:
    text = ADAPTIVE + ' parameters { key: "adaptive_queue_delay" value: { string_value: "false" } }'

    answers = sent_without_waiting(BatchQueue(settings(text)), [2000 * i for i in range(12)])

    assert not any(answers)


def test_adaptive_queue_delay_must_be_a_boolean() -> None:
    text = ADAPTIVE + ' parameters { key: "adaptive_queue_delay" value: { string_value: "sometimes" } }'

    with pytest.raises(InvalidArgumentError, match="adaptive_queue_delay"):
        settings(text)


def closed_loop_rounds(queue: BatchQueue, clients: int, rounds: int, start_us: int = 0) -> list[bool]:
    """``clients`` clients each waiting on its answer, ``rounds`` times: all of them send (20 us
    apart), then the batcher looks. For each round: did the batch go before the delay?"""
    answers = []
    for number in range(rounds):
        at = start_us + number * 2000
        for index in range(clients):
            queue.add(scheduled(), now=(at + 20 * index) * US, overlapping=index > 0, in_server=index + 1)
        now = (at + 20 * clients) * US
        batch, _ = queue.next_batch(now, in_server=clients)
        answers.append(len(batch) == clients)
        if not batch:
            assert len(queue.next_batch((at + 600) * US, in_server=clients)[0]) == clients
    return answers


def test_a_batch_holding_every_client_goes_without_the_delay() -> None:
    answers = closed_loop_rounds(BatchQueue(settings(ADAPTIVE)), clients=4, rounds=8)

    assert answers[:4] == [False] * 4, "with no history the configured delay applies"
    assert answers[4:] == [True] * 4


def test_a_batch_waits_while_other_requests_are_still_in_the_server() -> None:
    queue = BatchQueue(settings(ADAPTIVE))
    closed_loop_rounds(queue, clients=4, rounds=8)
    for index in range(3):  # the fourth client's request is still being answered elsewhere
        queue.add(scheduled(), now=(50_000 + 20 * index) * US, overlapping=True, in_server=index + 2)

    batch, wake_at = queue.next_batch(50_100 * US, in_server=4)

    assert batch == [] and wake_at == 50_500 * US


def test_a_batch_waits_when_more_clients_were_in_the_server_recently() -> None:
    queue = BatchQueue(settings(ADAPTIVE))
    closed_loop_rounds(queue, clients=5, rounds=8)

    answers = closed_loop_rounds(queue, clients=4, rounds=1, start_us=50_000)

    assert answers == [False], "the fifth client may be on its way"


def test_without_the_adaptive_delay_every_batch_waits() -> None:
    text = ADAPTIVE + ' parameters { key: "adaptive_queue_delay" value: { string_value: "false" } }'

    assert not any(closed_loop_rounds(BatchQueue(settings(text)), clients=4, rounds=8))


def test_all_here_once_every_recent_client_is_queued() -> None:
    fresh = BatchQueue(settings(ADAPTIVE))
    for index in range(4):
        fresh.add(scheduled(), now=index * US, overlapping=index > 0, in_server=index + 1)
    assert not fresh.all_here(4), "with no history, more clients may be coming"

    queue = BatchQueue(settings(ADAPTIVE))
    closed_loop_rounds(queue, clients=4, rounds=8)
    assert len(queue) == 0
    for index in range(3):
        queue.add(scheduled(), now=(50_000 + index) * US, overlapping=True, in_server=index + 2)
    assert not queue.all_here(4), "the fourth client's request is still in the server"
    queue.add(scheduled(), now=50_004 * US, overlapping=True, in_server=4)
    assert queue.all_here(4)
