"""The per-request shortcuts of the inference path answer as the long ways they replace.

The router keeps one route per version instead of building one per request, a model finds its newest
ready version without sorting, a batch of one output resolves its requests directly, and the batch
queue skips timeouts no policy sets: each is checked here against what it stands for.
"""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import numpy as np
import pytest
from tritonclient.grpc import model_config_pb2 as mc

from conch.core.errors import UnavailableError
from conch.core.types import ExecutionTiming
from conch.models.fallback import FallbackReason, mark_cpu_fallback
from conch.models.model import Model, ModelState, ModelVersion
from conch.models.served_models import ServedModels
from conch.models.strategy import FallbackLevel
from conch.observability.statistics import ModelStatistics
from conch.router.router import VersionRouter
from conch.scheduling.batch_queue import BatchingSettings, BatchQueue, QueuePolicy, shape_key
from conch.scheduling.dynamic_batcher import DynamicBatcher
from conch.scheduling.instance_pool import InstancePool
from conch.scheduling.scheduler import ScheduledRequest


def version(number: int, state: ModelState = ModelState.READY, standby: bool = False) -> ModelVersion:
    served = ModelVersion("m", number, mc.ModelConfig(name="m", max_batch_size=4))
    served.state = state
    served.standby = standby
    return served


def test_the_newest_ready_version_is_the_last_of_the_ready_versions_in_every_case() -> None:
    states = [ModelState.READY, ModelState.UNAVAILABLE, ModelState.LOADING]
    for count in range(4):
        for kinds in itertools.product(itertools.product(states, [False, True]), repeat=count):
            # Versions inserted newest first, so that the dict's order is not the versions' order.
            numbers = [3, 1, 2][:count]
            model = Model(
                "m", versions={n: version(n, s, b) for n, (s, b) in zip(numbers, kinds, strict=True)}
            )
            ready = model.ready_versions
            assert ready == [v for _, v in sorted(model.versions.items()) if v.ready and not v.standby]
            assert model.newest_ready_version() is (ready[-1] if ready else None)


def router_for(*versions: ModelVersion) -> VersionRouter:
    repository = ServedModels(Path("."))
    repository.models["m"] = Model("m", versions={v.version: v for v in versions}, max_batch_size=4)
    return VersionRouter(repository)


def test_a_version_keeps_one_route_and_a_new_fallback_mark_makes_a_new_one() -> None:
    served = version(1)
    router = router_for(served)
    first = router.route("m")
    assert router.route("m") is first and router.route("m", "1") is first
    assert first.parameters == {}

    mark_cpu_fallback(served, FallbackReason.DEVICE_ERROR)

    marked = router.route("m")
    assert marked is not first
    assert (marked.level, marked.reason) == (FallbackLevel.CPU, FallbackReason.DEVICE_ERROR)
    assert router.fallbacks[("m", "1", "CPU", "device_error")] == 1


def test_a_copied_version_does_not_answer_with_the_route_of_the_original() -> None:
    served = version(1)
    router_for(served).route("m")
    copy = version(1)
    copy.plain_route = served.plain_route
    assert router_for(copy).route("m").version is copy


def scheduled(width: int = 4, dtype: type = np.float32, **parameters: object) -> ScheduledRequest:
    return ScheduledRequest({"INPUT0": np.zeros((1, width), dtype)}, ["OUTPUT0"], 1, dict(parameters))


def test_requests_share_a_batch_exactly_when_their_dtypes_and_shapes_agree() -> None:
    assert shape_key(scheduled()) == shape_key(scheduled())
    assert shape_key(scheduled(dtype=np.float32)) != shape_key(scheduled(dtype=np.float64))
    assert shape_key(scheduled(width=4)) != shape_key(scheduled(width=5))
    two = ScheduledRequest({"B": np.zeros((1, 2)), "A": np.zeros((1, 3))}, [], 1)
    same = ScheduledRequest({"A": np.zeros((2, 3)), "B": np.zeros((2, 2))}, [], 2)
    assert shape_key(two) == shape_key(same)


def test_without_a_timeout_in_any_policy_nothing_expires_and_the_delay_alone_decides() -> None:
    queue = BatchQueue(BatchingSettings(max_batch_size=8, max_queue_delay_ns=1_000))
    queue.add(scheduled(timeout=1), now=0)
    assert queue.expire(now=10**12) == []
    assert queue.next_batch(now=10) == ([], 1_000)


def test_a_timeout_on_one_priority_level_only_still_expires_there() -> None:
    settings = BatchingSettings(
        max_batch_size=8,
        max_queue_delay_ns=10**9,
        priority_levels=2,
        default_priority_level=2,
        policies={1: QueuePolicy(default_timeout_us=5)},
    )
    queue = BatchQueue(settings)
    late = queue.add(scheduled(priority=1), now=0)
    queue.add(scheduled(priority=2), now=0)
    assert queue.next_batch(now=1)[1] == 5_000
    assert queue.expire(now=5_000) == [late]
    assert len(queue) == 1


class Doubling:
    """An instance whose output is its input doubled, with one or two outputs."""

    def __init__(self, outputs: tuple[str, ...]) -> None:
        self.outputs = outputs

    def run(
        self, inputs: dict[str, np.ndarray], output_names: list[str], timing: ExecutionTiming
    ) -> dict[str, np.ndarray]:
        return {name: inputs["INPUT0"] * 2 for name in output_names}


def batched_answers(outputs: tuple[str, ...], asked: list[list[str]], ordered: bool) -> list[object]:
    async def main() -> list[object]:
        # The three requests fill the batch (1 + 2 + 3 rows), so it goes at once, as one batch.
        settings = BatchingSettings(max_batch_size=6, max_queue_delay_ns=10**9, preserve_ordering=ordered)
        batcher = DynamicBatcher(settings, InstancePool([Doubling(outputs)], "m"), ModelStatistics("m", "1"))
        requests = [
            ScheduledRequest({"INPUT0": np.full((i + 1, 2), i, np.float32)}, names, i + 1)
            for i, names in enumerate(asked)
        ]
        try:
            return list(await asyncio.gather(*(batcher.schedule(r) for r in requests)))
        finally:
            batcher.close()

    return asyncio.run(main())


def test_each_request_gets_its_own_rows_of_each_output_it_asked_for() -> None:
    for ordered in (False, True):
        one = batched_answers(("Y",), [["Y"], ["Y"], ["Y"]], ordered)
        assert [{k: v.tolist() for k, v in a.items()} for a in one] == [  # type: ignore[attr-defined]
            {"Y": [[0, 0]]},
            {"Y": [[2, 2], [2, 2]]},
            {"Y": [[4, 4], [4, 4], [4, 4]]},
        ]
        two = batched_answers(("Y", "Z"), [["Y"], ["Z", "Y"], ["Z"]], ordered)
        assert [sorted(a) for a in two] == [["Y"], ["Y", "Z"], ["Z"]]  # type: ignore[call-overload]
        assert two[1]["Z"].tolist() == [[2, 2], [2, 2]]  # type: ignore[index]


def test_a_queue_that_is_full_still_refuses() -> None:
    queue = BatchQueue(BatchingSettings(max_batch_size=8, default_policy=QueuePolicy(max_queue_size=1)))
    queue.add(scheduled(), now=0)
    with pytest.raises(UnavailableError, match="queue is full"):
        queue.add(scheduled(), now=0)
