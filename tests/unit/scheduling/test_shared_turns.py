"""Turns shared by a model's versions during a release: real batchers and direct schedulers over real
instance pools whose executions run on worker threads; two versions of a model in a release never
compute at once beyond the larger one's instance count, take turns first come first served, and run
side by side again once the release ends."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest

from conch.core.errors import UnavailableError
from conch.core.types import ExecutionTiming
from conch.observability.statistics import ModelStatistics
from conch.scheduling.batch_queue import BatchingSettings
from conch.scheduling.dynamic_batcher import DynamicBatcher
from conch.scheduling.instance_pool import InstancePool
from conch.scheduling.scheduler import DirectScheduler, ScheduledRequest
from conch.scheduling.shared_turns import LineWaits, ModelTurns, share_turns, turns_of


class Overlaps:
    """How many executions of any version run at once, at most, and in what order they started."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = 0
        self.most = 0
        self.started: list[str] = []


class Slow:
    """An instance of version ``tag`` whose executions take 20 ms on its worker thread."""

    def __init__(self, tag: str, overlaps: Overlaps) -> None:
        self.tag = tag
        self.overlaps = overlaps

    def run(
        self, inputs: dict[str, np.ndarray], output_names: list[str], timing: ExecutionTiming
    ) -> dict[str, np.ndarray]:
        with self.overlaps.lock:
            self.overlaps.now += 1
            self.overlaps.most = max(self.overlaps.most, self.overlaps.now)
            self.overlaps.started.append(self.tag)
        time.sleep(0.02)
        timing.compute_infer_ns = 20_000_000  # measured as long: never run on the event loop
        with self.overlaps.lock:
            self.overlaps.now -= 1
        return {"OUTPUT0": inputs["INPUT0"] + 1}


def request() -> ScheduledRequest:
    return ScheduledRequest({"INPUT0": np.zeros((1, 1), np.float32)}, ["OUTPUT0"], 1)


def batcher(tag: str, overlaps: Overlaps, instances: int = 1) -> DynamicBatcher:
    pool = InstancePool([Slow(tag, overlaps) for _ in range(instances)], f"m-{tag}", "m")
    return DynamicBatcher(BatchingSettings(max_batch_size=1), pool, ModelStatistics("m", tag))


@pytest.fixture(autouse=True)
def no_release() -> Iterator[None]:
    share_turns(set())
    yield
    share_turns(set())


async def answer_all(*schedulers: DynamicBatcher | DirectScheduler, each: int = 6) -> None:
    try:
        await asyncio.gather(*(s.schedule(request()) for s in schedulers for _ in range(each)))
    finally:
        for scheduler in schedulers:
            scheduler.close()


def test_without_a_release_two_versions_compute_side_by_side() -> None:
    overlaps = Overlaps()
    asyncio.run(answer_all(batcher("1", overlaps), batcher("2", overlaps)))
    assert overlaps.most == 2


def test_in_a_release_the_versions_take_turns_one_execution_at_a_time() -> None:
    share_turns({"m"})
    overlaps = Overlaps()
    asyncio.run(answer_all(batcher("1", overlaps), batcher("2", overlaps)))
    assert overlaps.most == 1
    assert sorted(overlaps.started) == ["1"] * 6 + ["2"] * 6
    # First come, first served: neither version's executions all run before the other's.
    assert overlaps.started[:6] != ["1"] * 6 and overlaps.started[:6] != ["2"] * 6


def test_the_line_runs_as_many_at_once_as_the_larger_version_has_instances() -> None:
    share_turns({"m"})
    overlaps = Overlaps()
    asyncio.run(answer_all(batcher("1", overlaps, instances=2), batcher("2", overlaps)))
    assert overlaps.most == 2


def test_direct_schedulers_take_turns_too() -> None:
    share_turns({"m"})
    overlaps = Overlaps()
    direct = [
        DirectScheduler(InstancePool([Slow(tag, overlaps)], f"m-{tag}", "m"), ModelStatistics("m", tag))
        for tag in ("1", "2")
    ]
    asyncio.run(answer_all(*direct, each=3))
    assert overlaps.most == 1 and len(overlaps.started) == 6


def test_other_models_never_wait_in_a_release_s_line() -> None:
    share_turns({"m"})
    overlaps = Overlaps()
    other = DynamicBatcher(
        BatchingSettings(max_batch_size=1),
        InstancePool([Slow("other", overlaps)], "other-1", "other"),
        ModelStatistics("other", "1"),
    )
    asyncio.run(answer_all(batcher("1", overlaps), other))
    assert overlaps.most == 2


def test_when_the_release_ends_those_waiting_in_line_go_on_at_once() -> None:
    async def main() -> None:
        share_turns({"m"})
        turns = turns_of("m")
        assert turns is not None
        await turns.take(1)
        waiting = asyncio.ensure_future(turns.take(1))
        await asyncio.sleep(0.01)
        assert not waiting.done()
        share_turns(set())
        await asyncio.wait_for(waiting, 1)
        assert turns_of("m") is None

    asyncio.run(main())


def test_a_caller_cancelled_in_line_neither_keeps_nor_loses_a_turn() -> None:
    async def main() -> None:
        turns = ModelTurns()
        await turns.take(1)
        cancelled = asyncio.ensure_future(turns.take(1))
        after = asyncio.ensure_future(turns.take(1))
        await asyncio.sleep(0)
        cancelled.cancel()
        await asyncio.sleep(0)
        turns.give()
        await asyncio.wait_for(after, 1)  # the turn went past the cancelled caller
        assert turns.running == 1
        turns.give()
        assert turns.running == 0

    asyncio.run(main())


def test_a_batch_whose_batcher_closes_while_in_line_is_answered_503() -> None:
    async def main() -> None:
        share_turns({"m"})
        overlaps = Overlaps()
        turns = turns_of("m")
        assert turns is not None
        await turns.take(1)  # another version's execution holds the one turn
        waiting = batcher("2", overlaps)
        answer = asyncio.ensure_future(waiting.schedule(request()))
        await asyncio.sleep(0.05)
        waiting.close()
        with pytest.raises(UnavailableError):
            await asyncio.wait_for(answer, 1)
        turns.give()
        assert turns.running == 0 and overlaps.started == []

    asyncio.run(main())


class Timed:
    """An instance whose executions report ``infer_ns`` of compute."""

    def __init__(self, infer_ns: int) -> None:
        self.infer_ns = infer_ns

    def run(
        self, inputs: dict[str, np.ndarray], output_names: list[str], timing: ExecutionTiming
    ) -> dict[str, np.ndarray]:
        timing.compute_infer_ns = self.infer_ns
        return {"OUTPUT0": inputs["INPUT0"]}


def test_in_a_release_both_versions_place_and_batch_by_the_line_s_average() -> None:
    async def main() -> None:
        short, long = (
            InstancePool([Timed(1_000_000)], "m-1", "m"),
            InstancePool([Timed(9_000_000)], "m-2", "m"),
        )
        inputs = {"INPUT0": np.zeros((1, 1), np.float32)}
        for pool in (short, long):
            await pool.run(pool.instances[0], inputs, ["OUTPUT0"])
        assert (short.average_execution_ns, long.average_execution_ns) == (1_000_000, 9_000_000)
        assert short.always_inline and not long.always_inline, "apart, each by its own executions"
        share_turns({"m"})
        for pool in (short, long) * 3:
            await pool.run(pool.instances[0], inputs, ["OUTPUT0"])
        assert short.average_execution_ns == long.average_execution_ns
        assert short.always_inline == long.always_inline
        share_turns(set())
        assert short.average_execution_ns != long.average_execution_ns, "after it, each by its own again"

    asyncio.run(main())


def test_overlapping_waits_in_the_line_count_once_and_a_wait_under_way_counts_so_far() -> None:
    waits = LineWaits()
    assert not waits.used
    waits.begin(100)
    waits.begin(150)  # a second execution of the version joins the wait
    waits.end(200)
    assert waits.total(250) == 150  # still one waiting: the wait under way counts
    waits.end(300)
    assert waits.total(1_000) == 200 and waits.used
    waits.begin(1_000)
    waits.end(1_050)
    assert waits.total(2_000) == 250


class Sleeps:
    """An instance whose executions sleep ``seconds`` on its worker thread."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def run(
        self, inputs: dict[str, np.ndarray], output_names: list[str], timing: ExecutionTiming
    ) -> dict[str, np.ndarray]:
        time.sleep(self.seconds)
        timing.compute_infer_ns = int(self.seconds * 1e9)  # measured as long: never on the event loop
        return {"OUTPUT0": inputs["INPUT0"]}


async def timed(scheduler: DynamicBatcher | DirectScheduler) -> tuple[float, float]:
    """Seconds one request took, and the part its version waited in the line."""
    scheduled = request()
    started = time.perf_counter()
    await scheduler.schedule(scheduled)
    return time.perf_counter() - started, scheduled.line_wait_ns / 1e9


@pytest.mark.parametrize("kind", ["batcher", "direct"])
def test_a_request_knows_how_long_its_version_waited_for_the_other_s_executions(kind: str) -> None:
    """The slow version holds the line for 60 ms; the fast one's two requests (one batch each) wait
    behind it, the second also for its own instance held in the line. Less that wait, each took about
    its own executions (10 ms and 20 ms), however long the other version's were."""

    def scheduler(seconds: float, tag: str) -> DynamicBatcher | DirectScheduler:
        pool = InstancePool([Sleeps(seconds)], f"m-{tag}", "m")
        if kind == "direct":
            return DirectScheduler(pool, ModelStatistics("m", tag))
        return DynamicBatcher(BatchingSettings(max_batch_size=1), pool, ModelStatistics("m", tag))

    async def main() -> list[tuple[float, float]]:
        slow, fast = scheduler(0.06, "1"), scheduler(0.01, "2")
        try:
            holding = asyncio.ensure_future(slow.schedule(request()))
            await asyncio.sleep(0.01)  # the slow version's execution has the turn
            results = await asyncio.gather(timed(fast), timed(fast))
            await holding
            return list(results)
        finally:
            slow.close()
            fast.close()

    share_turns({"m"})
    for (took, waited), own in zip(asyncio.run(main()), (0.01, 0.02), strict=True):
        assert waited > 0.03  # most of the slow execution's 60 ms
        assert own - 0.002 < took - waited < own + 0.025
    share_turns(set())
    took, waited = asyncio.run(main())[0]
    assert waited == 0.0


@pytest.mark.parametrize("line", ["m", "other"])
def test_a_batcher_waiting_for_company_stops_a_turn_after_another_execution_took_a_turn(line: str) -> None:
    """Five of its requests are in the server, none queued yet, so the batcher would give all 200
    turns for them to come. A turn taken at turn 5 in its own model's line (a release of ``m``) ends
    the wait a turn later; one taken in another model's line does not end it."""
    share_turns({line})

    async def turns_given(other_takes_at: int | None) -> int:
        waiting = batcher("1", Overlaps())
        waiting._outstanding = 5
        task = asyncio.ensure_future(waiting._turns_for_company(200))
        turns = 0
        while not task.done():
            if turns == other_takes_at:
                taken = turns_of(line)
                assert taken is not None
                await taken.take(1)
                taken.give()
            await asyncio.sleep(0)
            turns += 1
        waiting.close()
        return turns

    alone, interrupted = asyncio.run(turns_given(None)), asyncio.run(turns_given(5))
    assert alone > 200
    if line == "m":
        assert 5 < interrupted <= 8
    else:
        assert interrupted > 200
