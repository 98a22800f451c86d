"""The dynamic batcher on an event loop, with real instance pools of small Python models."""

from __future__ import annotations

import asyncio
import itertools
import statistics
import threading
import time
from collections.abc import Awaitable, Callable

import numpy as np
import pytest

from conch.core.errors import UnavailableError
from conch.core.types import ExecutionTiming
from conch.observability.statistics import ModelStatistics
from conch.scheduling.batch_queue import REJECT, BatchingSettings, QueuePolicy
from conch.scheduling.dynamic_batcher import TURNS_BEFORE_A_BATCH, DynamicBatcher
from conch.scheduling.instance_pool import INLINE_BELOW_NS, InstancePool
from conch.scheduling.scheduler import RequestsInFlight, ScheduledRequest

POISON = -1.0


class AddOne:
    """OUTPUT0 = INPUT0 + 1. Fails on a batch holding ``POISON``; with a gate, waits for it to open."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.gate = gate
        self.started = threading.Event()
        self.batch_sizes: list[int] = []
        self.outputs: list[np.ndarray] = []

    def run(
        self, inputs: dict[str, np.ndarray], output_names: list[str], timing: ExecutionTiming
    ) -> dict[str, np.ndarray]:
        self.started.set()
        if self.gate is not None:
            self.gate.wait(timeout=2)
        values = inputs["INPUT0"]
        self.batch_sizes.append(len(values))
        if (values == POISON).any():
            raise ValueError("poisoned row")
        output = values + 1
        self.outputs.append(output)
        return {"OUTPUT0": output}


def scheduled(*values: float) -> ScheduledRequest:
    """A request with one row per value."""
    rows = np.array(values, dtype=np.float32).reshape(-1, 1)
    return ScheduledRequest(inputs={"INPUT0": rows}, output_names=["OUTPUT0"], rows=len(values))


def make_batcher(
    *instances: AddOne,
    max_queue_delay_ns: int = 0,
    preserve_ordering: bool = False,
    default_policy: QueuePolicy | None = None,
    model: str = "add_one",
) -> tuple[DynamicBatcher, ModelStatistics]:
    """A batcher of up to 8 rows over ``instances`` of ``model``, and the statistics it records into."""
    statistics = ModelStatistics("add_one", "1")
    settings = BatchingSettings(
        max_batch_size=8,
        max_queue_delay_ns=max_queue_delay_ns,
        preserve_ordering=preserve_ordering,
        default_policy=default_policy or QueuePolicy(),
    )
    return DynamicBatcher(settings, InstancePool(list(instances), "add_one", model), statistics), statistics


async def until(condition: Callable[[], bool]) -> None:
    """Let the loop and worker threads run until ``condition`` holds (at most a second)."""
    deadline = time.monotonic() + 1
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.002)


async def hold_first_request(
    batcher: DynamicBatcher, instance: AddOne
) -> asyncio.Task[dict[str, np.ndarray]]:
    """Start one request and wait until ``instance`` is running it (held by its gate)."""
    first = asyncio.create_task(batcher.schedule(scheduled(100)))
    await until(instance.started.is_set)
    return first


def run(test: Callable[[], Awaitable[None]]) -> None:
    """Run one scenario on a fresh event loop; a stuck scenario fails after 3 s instead of hanging."""
    asyncio.run(asyncio.wait_for(test(), timeout=3))


def test_concurrent_requests_share_executions_and_get_their_own_rows() -> None:
    async def scenario() -> None:
        gate = threading.Event()
        instance = AddOne(gate)
        batcher, statistics = make_batcher(instance)
        first = await hold_first_request(batcher, instance)
        rows = [(1,), (2, 3), (4, 5, 6), (7,), (8,)]
        waiting = [asyncio.create_task(batcher.schedule(scheduled(*r))) for r in rows]
        await asyncio.sleep(0.01)
        gate.set()

        results = await asyncio.gather(first, *waiting)

        assert instance.batch_sizes == [1, 8], "the five waiting requests ran as one batch"
        assert (statistics.execution_count, statistics.inference_count) == (2, 9)
        assert statistics.batches.keys() == {1, 8}
        for values, result in zip([(100,), *rows], results, strict=True):
            assert result["OUTPUT0"].ravel().tolist() == [v + 1 for v in values]
        batcher.close()

    run(scenario)


def test_outputs_are_views_of_the_batch_output() -> None:
    async def scenario() -> None:
        gate = threading.Event()
        instance = AddOne(gate)
        batcher, _ = make_batcher(instance)
        first = await hold_first_request(batcher, instance)
        waiting = [asyncio.create_task(batcher.schedule(scheduled(v, v))) for v in (1, 2, 3)]
        await asyncio.sleep(0.01)
        gate.set()

        await first
        results = [r["OUTPUT0"] for r in await asyncio.gather(*waiting)]

        batch_output = instance.outputs[-1]
        assert batch_output.shape == (6, 1)
        assert all(r.base is batch_output and np.shares_memory(r, batch_output) for r in results)
        assert not np.shares_memory(results[0], results[1]), "each caller gets only its own rows"
        batcher.close()

    run(scenario)


def test_a_failing_request_fails_alone() -> None:
    async def scenario() -> None:
        gate = threading.Event()
        instance = AddOne(gate)
        batcher, statistics = make_batcher(instance)
        first = await hold_first_request(batcher, instance)
        before = asyncio.create_task(batcher.schedule(scheduled(1)))
        poisoned = asyncio.create_task(batcher.schedule(scheduled(2, POISON)))
        after = asyncio.create_task(batcher.schedule(scheduled(3)))
        await asyncio.sleep(0.01)
        gate.set()

        await first
        with pytest.raises(ValueError, match="poisoned row"):
            await poisoned

        assert (await before)["OUTPUT0"].ravel().tolist() == [2]
        assert (await after)["OUTPUT0"].ravel().tolist() == [4]
        assert instance.batch_sizes == [1, 4, 1, 2, 1], "the failed batch ran again one request at a time"
        assert statistics.inference_count == 3, "only successful executions are counted"
        batcher.close()

    run(scenario)


@pytest.mark.parametrize("preserve_ordering", [True, False])
def test_preserve_ordering_holds_a_later_response(preserve_ordering: bool) -> None:
    async def scenario() -> None:
        gate = threading.Event()
        slow, fast = AddOne(gate), AddOne()
        batcher, _ = make_batcher(slow, fast, preserve_ordering=preserve_ordering)
        first = await hold_first_request(batcher, slow)
        second = asyncio.create_task(batcher.schedule(scheduled(1)))
        await until(lambda: fast.outputs != [])
        await asyncio.sleep(0.02)

        assert second.done() == (not preserve_ordering), "its answer is held until the first one's"
        gate.set()
        results = await asyncio.gather(first, second)
        assert [r["OUTPUT0"].item() for r in results] == [101, 2]
        batcher.close()

    run(scenario)


def test_preserve_ordering_releases_responses_in_arrival_order() -> None:
    async def scenario() -> None:
        gate = threading.Event()
        slow, fast = AddOne(gate), AddOne()
        batcher, _ = make_batcher(slow, fast, preserve_ordering=True)
        answered: list[int] = []

        async def call(value: int) -> None:
            await batcher.schedule(scheduled(value))
            answered.append(value)

        first = asyncio.create_task(call(1))
        await until(slow.started.is_set)
        others = [asyncio.create_task(call(v)) for v in (2, 3, 4)]
        await until(lambda: sum(fast.batch_sizes) == 3)
        gate.set()
        await asyncio.gather(first, *others)

        assert answered == [1, 2, 3, 4]
        batcher.close()

    run(scenario)


def test_a_full_queue_refuses_at_once() -> None:
    async def scenario() -> None:
        gate = threading.Event()
        instance = AddOne(gate)
        batcher, _ = make_batcher(instance, default_policy=QueuePolicy(max_queue_size=1))
        first = await hold_first_request(batcher, instance)
        queued = asyncio.create_task(batcher.schedule(scheduled(1)))
        await asyncio.sleep(0.01)

        with pytest.raises(UnavailableError) as refused:
            await asyncio.wait_for(batcher.schedule(scheduled(2)), timeout=0.1)

        assert refused.value.kind.http_status == 503
        gate.set()
        await first
        assert (await queued)["OUTPUT0"].item() == 2
        batcher.close()

    run(scenario)


def test_a_request_past_its_reject_timeout_fails_without_running() -> None:
    async def scenario() -> None:
        instance = AddOne()
        batcher, statistics = make_batcher(
            instance,
            max_queue_delay_ns=2_000_000_000,
            default_policy=QueuePolicy(timeout_action=REJECT, default_timeout_us=20_000),
        )
        started = time.perf_counter()

        with pytest.raises(UnavailableError, match="timed out"):
            await batcher.schedule(scheduled(1))

        assert 0.02 <= time.perf_counter() - started < 0.5, "woken by the timeout, not the 2 s delay"
        assert instance.batch_sizes == []
        assert statistics.execution_count == 0
        batcher.close()

    run(scenario)


def test_close_cancels_the_batching_loop() -> None:
    async def scenario() -> None:
        instance = AddOne()
        batcher, _ = make_batcher(instance, max_queue_delay_ns=50_000_000)
        queued = asyncio.create_task(batcher.schedule(scheduled(1)))
        await asyncio.sleep(0.01)
        (loop_task,) = [t for t in asyncio.all_tasks() if t.get_name() == "conch-batcher"]

        batcher.close()
        await asyncio.sleep(0.1)

        assert loop_task.cancelled()
        assert instance.batch_sizes == [], "the queued request is never sent once the loop is gone"
        queued.cancel()

    run(scenario)


class ThreadRecorder(AddOne):
    """AddOne that notes which thread ran it."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: list[int] = []

    def run(
        self, inputs: dict[str, np.ndarray], output_names: list[str], timing: ExecutionTiming
    ) -> dict[str, np.ndarray]:
        self.threads.append(threading.get_ident())
        return super().run(inputs, output_names, timing)


class TimedRecorder(ThreadRecorder):
    """ThreadRecorder that takes ``seconds`` and reports it in its timing, as a backend does."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def run(
        self, inputs: dict[str, np.ndarray], output_names: list[str], timing: ExecutionTiming
    ) -> dict[str, np.ndarray]:
        time.sleep(self.seconds)
        timing.compute_infer_ns = int(self.seconds * 1e9)
        return super().run(inputs, output_names, timing)


async def schedule_among_others(batcher: DynamicBatcher, times: int) -> None:
    """``times`` requests one after the other, each while other requests are in the server."""
    in_flight = RequestsInFlight()
    in_flight.count = 5
    for _ in range(times):
        request = scheduled(1)
        request.in_flight = in_flight
        await batcher.schedule(request)


@pytest.mark.parametrize(("requests_in_server", "on_the_loop"), [(1, True), (2, False)])
def test_a_request_alone_in_the_server_runs_on_the_event_loop(
    requests_in_server: int, on_the_loop: bool
) -> None:
    async def scenario() -> None:
        # Two instances: executions could run side by side, so only a request alone takes the loop.
        instance, spare = TimedRecorder(0.0005), TimedRecorder(0.0005)
        spare.threads = instance.threads  # one record, in the order the executions ran
        batcher, _ = make_batcher(instance, spare)
        in_flight = RequestsInFlight()
        in_flight.count = requests_in_server
        results = []
        for _ in range(2):  # the first execution is measured on the worker thread
            request = scheduled(1)
            request.in_flight = in_flight
            results.append(await batcher.schedule(request))

        assert [r["OUTPUT0"].ravel().tolist() for r in results] == [[2], [2]]
        assert instance.threads[0] != threading.get_ident()
        assert (instance.threads[1] == threading.get_ident()) is on_the_loop
        batcher.close()

    run(scenario)


def test_a_single_instance_of_a_short_model_runs_on_the_loop_under_load() -> None:
    async def scenario() -> None:
        instance = TimedRecorder(0.0005)  # over the hop to a thread, under the loop's bound
        batcher, _ = make_batcher(instance)
        await schedule_among_others(batcher, 3)

        loop_thread = threading.get_ident()
        assert instance.threads[0] != loop_thread  # measured on the worker thread first
        assert instance.threads[1:] == [loop_thread, loop_thread]
        batcher.close()

    run(scenario)


def test_a_single_instance_over_the_loops_bound_never_runs_on_the_loop() -> None:
    async def scenario() -> None:
        # Over the bound from its first execution: that measurement sets the average, so the
        # executions after it do not run on the loop while a smoothed average climbs from below.
        instance = TimedRecorder(INLINE_BELOW_NS * 1.5 / 1e9)
        batcher, _ = make_batcher(instance)
        await schedule_among_others(batcher, 3)

        assert threading.get_ident() not in instance.threads
        assert len(instance.threads) == 3
        batcher.close()

    run(scenario)


def test_a_short_model_goes_to_its_thread_once_another_model_has_started_an_execution() -> None:
    async def scenario() -> None:
        first, second = TimedRecorder(0.0005), TimedRecorder(0.0005)
        first_batcher, _ = make_batcher(first, model="first")
        second_batcher, _ = make_batcher(second, model="second")

        loop_thread = threading.get_ident()
        for batcher in (first_batcher, first_batcher, second_batcher, first_batcher, first_batcher):
            await schedule_among_others(batcher, 1)
        # first: measured on its thread, then on the loop; after the second model's execution, on
        # its thread again (the two could compute side by side); then, alone again, on the loop.
        assert first.threads[1] == loop_thread
        assert first.threads[2] != loop_thread
        assert first.threads[3] == loop_thread
        first_batcher.close()
        second_batcher.close()

    run(scenario)


def test_two_versions_of_one_model_stay_on_the_loop_between_each_others_executions() -> None:
    """A release's canary and its baseline share the model's traffic: neither sends the other to its
    worker thread, or the canary (rarely the last to run at 10%) would answer slower than the baseline."""

    async def scenario() -> None:
        baseline, canary = TimedRecorder(0.0005), TimedRecorder(0.0005)
        baseline_batcher, _ = make_batcher(baseline, model="scored")
        canary_batcher, _ = make_batcher(canary, model="scored")

        loop_thread = threading.get_ident()
        order = (baseline_batcher, canary_batcher, baseline_batcher, canary_batcher, baseline_batcher)
        for batcher in order:
            await schedule_among_others(batcher, 1)
        # each version's first execution is measured on its thread; after that, on the loop
        assert baseline.threads[1:] == [loop_thread, loop_thread]
        assert canary.threads[1] == loop_thread
        baseline_batcher.close()
        canary_batcher.close()

    run(scenario)


def test_a_slow_model_alone_goes_back_to_its_thread_once_measured() -> None:
    async def scenario() -> None:
        instance = TimedRecorder(0.03)
        batcher, _ = make_batcher(instance)
        in_flight = RequestsInFlight()
        in_flight.count = 1
        for _ in range(2):
            request = scheduled(1)
            request.in_flight = in_flight
            await batcher.schedule(request)

        assert instance.threads[-1] != threading.get_ident(), "a 30 ms model must not hold the event loop"
        batcher.close()

    run(scenario)


def test_requests_arriving_together_share_a_batch_even_when_the_first_looked_alone() -> None:
    """The batching task's turn on the loop is the window in which concurrent requests are read: a
    request that runs the moment it arrives, because it was alone so far, leaves every later one alone
    too, and batches never form under load."""

    async def scenario() -> None:
        instance = TimedRecorder(0.0005)
        batcher, _ = make_batcher(instance)
        in_flight = RequestsInFlight()

        async def arrive(value: float) -> dict[str, np.ndarray]:
            in_flight.count += 1  # as InferenceServer.infer does before scheduling
            request = scheduled(value)
            request.in_flight = in_flight
            try:
                return await batcher.schedule(request)
            finally:
                in_flight.count -= 1

        await arrive(1)  # measured on the worker thread; the batcher then idles, holding the instance
        await asyncio.sleep(0.01)
        instance.batch_sizes.clear()

        results = await asyncio.gather(arrive(10), arrive(20))

        assert [r["OUTPUT0"].ravel().tolist() for r in results] == [[11], [21]]
        assert instance.batch_sizes == [2]
        batcher.close()

    run(scenario)


def test_requests_on_their_way_when_the_instance_frees_join_the_next_batch() -> None:
    """Once the instance frees, the batcher lets the loop turn before it forms the batch: a request
    a few turns from the queue (as one being read by the frontend is) joins the requests waiting."""

    async def scenario() -> None:
        gate = threading.Event()
        instance = AddOne(gate)
        batcher, _ = make_batcher(instance)
        results = await answers_with_one_on_its_way(batcher, instance, gate, turns_away=5)

        assert [r["OUTPUT0"].ravel().tolist() for r in results] == [[2], [3], [4]]
        assert instance.batch_sizes == [1, 3]
        batcher.close()

    run(scenario)


async def answers_with_one_on_its_way(
    batcher: DynamicBatcher, instance: AddOne, gate: threading.Event, turns_away: int
) -> list[dict[str, np.ndarray]]:
    """Hold a first request on ``instance``, queue two more, then open ``gate``; once the first is
    answered (after the instance is released), a fourth sets off ``turns_away`` turns of the loop
    from the queue. The answers of the last three, in order."""
    first = await hold_first_request(batcher, instance)
    waiting = [asyncio.create_task(batcher.schedule(scheduled(v))) for v in (1, 2)]
    await asyncio.sleep(0.01)

    async def on_its_way() -> dict[str, np.ndarray]:
        for _ in range(turns_away):
            await asyncio.sleep(0)
        return await batcher.schedule(scheduled(3))

    late: list[asyncio.Task[dict[str, np.ndarray]]] = []
    first.add_done_callback(lambda _: late.append(asyncio.create_task(on_its_way())))
    gate.set()
    await first
    await until(lambda: bool(late))
    return list(await asyncio.gather(*waiting, late[0]))


class ReportedTime(AddOne):
    """AddOne held by its gate that reports ``reported_ns`` of compute, as a backend's timing does."""

    def __init__(self, gate: threading.Event, reported_ns: int) -> None:
        super().__init__(gate)
        self.reported_ns = reported_ns

    def run(
        self, inputs: dict[str, np.ndarray], output_names: list[str], timing: ExecutionTiming
    ) -> dict[str, np.ndarray]:
        timing.compute_infer_ns = self.reported_ns
        return super().run(inputs, output_names, timing)


@pytest.mark.parametrize(
    ("reported_ns", "batch_sizes"),
    [(5_000_000, [1, 3]), (0, [1, 2, 1])],
    ids=["long executions wait for it", "short executions do not"],
)
def test_a_model_with_long_executions_waits_longer_for_requests_on_their_way(
    reported_ns: int, batch_sizes: list[int]
) -> None:
    """A request 100 turns of the loop away when the instance frees joins the next batch of a model
    whose executions are long (200 turns), and misses the batch of a short one (40 turns)."""

    async def scenario() -> None:
        gate = threading.Event()
        instance = ReportedTime(gate, reported_ns)
        batcher, _ = make_batcher(instance)
        results = await answers_with_one_on_its_way(batcher, instance, gate, turns_away=100)

        assert [r["OUTPUT0"].ravel().tolist() for r in results] == [[2], [3], [4]]
        assert instance.batch_sizes == batch_sizes
        batcher.close()

    run(scenario)


class OnePermitPerRun(AddOne):
    """AddOne whose every execution waits for a permit from the test. It reports executions longer than
    the event loop may be held, so they run on its worker thread while the loop goes on."""

    def __init__(self) -> None:
        super().__init__()
        self.permits = threading.Semaphore(0)
        self.begun = 0

    def run(
        self, inputs: dict[str, np.ndarray], output_names: list[str], timing: ExecutionTiming
    ) -> dict[str, np.ndarray]:
        self.begun += 1
        assert self.permits.acquire(timeout=2)
        timing.compute_infer_ns = 2 * INLINE_BELOW_NS
        return super().run(inputs, output_names, timing)


def test_requests_arriving_while_others_are_answered_keep_the_delay_though_batches_stay_single() -> None:
    """The batcher tells the queue which requests arrived while another was still being answered: a
    lone client's never do, a loaded server's do even when each batch holds one request."""
    delay_s = 0.05

    async def scenario() -> None:
        instance = OnePermitPerRun()
        batcher, _ = make_batcher(instance, max_queue_delay_ns=int(delay_s * 1e9))
        instance.permits.release(6)
        for value in range(6):  # a lone client: after a few single batches it no longer waits
            await batcher.schedule(scheduled(value))
        # A pipeline: each request arrives while the one before it still runs, and runs alone.
        begun = instance.begun
        running = asyncio.create_task(batcher.schedule(scheduled(10)))
        await until(lambda: instance.begun > begun)
        for value in range(11, 19):
            begun = instance.begun
            arriving = asyncio.create_task(batcher.schedule(scheduled(value)))
            await asyncio.sleep(0.002)
            instance.permits.release()
            await running
            await until(lambda begun=begun: instance.begun > begun)  # `arriving` runs alone first
            running = arriving
        instance.permits.release(2)
        await running
        assert set(instance.batch_sizes) == {1}

        started = time.monotonic()
        result = await batcher.schedule(scheduled(30))

        assert result["OUTPUT0"].ravel().tolist() == [31]
        assert time.monotonic() - started >= 0.9 * delay_s, "the last request should wait for company"
        batcher.close()

    run(scenario)


class TaskNameRecorder(AddOne):
    """AddOne that notes the name of the asyncio task that ran it (None on a worker thread)."""

    def __init__(self) -> None:
        super().__init__()
        self.task_names: list[str | None] = []

    def run(
        self, inputs: dict[str, np.ndarray], output_names: list[str], timing: ExecutionTiming
    ) -> dict[str, np.ndarray]:
        try:
            task = asyncio.current_task()
        except RuntimeError:
            task = None
        self.task_names.append(None if task is None else task.get_name())
        return super().run(inputs, output_names, timing)


def test_a_fast_single_instance_runs_its_batches_in_the_batching_task() -> None:
    async def scenario() -> None:
        instance = TaskNameRecorder()  # reports no compute time: its average falls below the hop
        batcher, statistics = make_batcher(instance)
        for value in range(40):
            result = await batcher.schedule(scheduled(value))
            assert result["OUTPUT0"].ravel().tolist() == [value + 1]

        assert instance.task_names[0] is None, "unmeasured, the first execution goes to the thread"
        assert instance.task_names[-1] == "conch-batcher", "no task of its own once always inline"
        assert statistics.execution_count == 40
        batcher.close()

    run(scenario)


class CountsTurns(AddOne):
    """AddOne that notes, at each execution, how many turns the event loop has made."""

    def __init__(self) -> None:
        super().__init__()
        self.turns = 0
        self.turns_at_runs: list[int] = []

    def run(
        self, inputs: dict[str, np.ndarray], output_names: list[str], timing: ExecutionTiming
    ) -> dict[str, np.ndarray]:
        self.turns_at_runs.append(self.turns)
        return super().run(inputs, output_names, timing)


def test_the_turns_before_a_batch_stop_once_every_waiting_client_has_sent() -> None:
    """Four clients, each sending again as soon as it is answered: once the batches have shown that
    four is all there are, the batcher stops giving the loop turns as soon as the four are queued,
    instead of giving all 40 (each turn polls the sockets: a system call per turn)."""

    async def scenario() -> None:
        instance = CountsTurns()
        batcher, _ = make_batcher(instance)
        loop = asyncio.get_running_loop()

        def tick() -> None:
            instance.turns += 1
            loop.call_soon(tick)

        loop.call_soon(tick)

        async def client(value: float) -> None:
            for _ in range(20):
                await batcher.schedule(scheduled(value))

        await asyncio.gather(*(client(v) for v in range(4)))
        batcher.close()
        gaps = [later - earlier for earlier, later in itertools.pairwise(instance.turns_at_runs)]

        assert instance.batch_sizes[1:] == [4] * (len(instance.batch_sizes) - 1)
        assert min(gaps[:3]) >= TURNS_BEFORE_A_BATCH, "with no history, every turn is given"
        # Each execution runs on the worker thread and takes a few turns of its own (5 to 30 here),
        # so the turns between two executions are the batcher's 40 and those, or those alone.
        assert statistics.median(gaps[8:]) < TURNS_BEFORE_A_BATCH, gaps

    run(scenario)
