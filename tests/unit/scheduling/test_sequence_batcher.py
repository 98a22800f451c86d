"""The sequence batcher on an event loop, over real ONNX Runtime sessions of the accumulator model.

Each instance is recorded as it runs, so the tests see the rows the batcher fed (controls, CORRID,
state) as well as the answers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto
from tritonclient.grpc import model_config_pb2 as mc

from conch.backends.onnxruntime import OnnxRuntimeInstance, read_signature
from conch.core.errors import InvalidArgumentError, UnavailableError
from conch.core.types import ExecutionTiming
from conch.observability.statistics import ModelStatistics
from conch.repository.autocomplete import complete_from_signature
from conch.repository.config import parse_config
from conch.scheduling import create_scheduler
from conch.scheduling.instance_pool import InstancePool
from conch.scheduling.scheduler import ScheduledRequest
from conch.scheduling.sequence_batcher import SequenceBatcher
from tests.fixtures.sequence_models import accumulator_config, accumulator_model

OUTPUTS = ["OUTPUT", "CONTROLS", "CORRID_OUT"]


class Recorded:
    """A real instance that keeps the inputs of every execution."""

    def __init__(self, instance: OnnxRuntimeInstance) -> None:
        self.instance = instance
        self.batches: list[dict[str, np.ndarray]] = []

    def run(
        self, inputs: dict[str, np.ndarray], output_names: list[str], timing: ExecutionTiming
    ) -> dict[str, np.ndarray]:
        self.batches.append(inputs)
        return self.instance.run(inputs, output_names, timing)


def build(
    instances: int = 1, corrid: int = TensorProto.UINT64, **config_args: Any
) -> tuple[SequenceBatcher, list[Recorded], ModelStatistics, mc.ModelConfig]:
    corrid_type = "TYPE_STRING" if corrid == TensorProto.STRING else "TYPE_UINT64"
    config = parse_config(
        accumulator_config("acc", instances=instances, corrid_type=corrid_type, **config_args)
    )
    model = accumulator_model(corrid).SerializeToString()
    sessions = [ort.InferenceSession(model, providers=["CPUExecutionProvider"]) for _ in range(instances)]
    complete_from_signature(config, read_signature(sessions[0]), {"max_batch_size"})
    recorded = [Recorded(OnnxRuntimeInstance(s, config)) for s in sessions]
    statistics = ModelStatistics("acc", "1")
    scheduler = create_scheduler(config, InstancePool(list(recorded), "acc"), statistics)
    assert isinstance(scheduler, SequenceBatcher)
    return scheduler, recorded, statistics, config


def request(sequence_id: int | str, value: float, start: bool = False, end: bool = False) -> ScheduledRequest:
    parameters = {"sequence_id": sequence_id, "sequence_start": start, "sequence_end": end}
    return ScheduledRequest({"INPUT": np.array([[value]], np.float32)}, OUTPUTS, 1, parameters)


def total(answer: dict[str, np.ndarray]) -> float:
    return float(answer["OUTPUT"][0, 0])


def run(body: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(body(), timeout=10))


def test_direct_interleaved_sequences_keep_their_own_sums_and_slots() -> None:
    batcher, (instance,), statistics, _ = build()

    async def body() -> None:
        first = await asyncio.gather(
            batcher.schedule(request(1, 1, start=True)), batcher.schedule(request(2, 10, start=True))
        )
        assert [total(a) for a in first] == [1, 10]
        assert instance.batches[-1]["CORRID"].ravel().tolist() == [1, 2]
        assert instance.batches[-1]["START"].ravel().tolist() == [1, 1]
        # Only sequence 2 (slot 1) sends: slot 0 goes as a not-ready row.
        alone = await batcher.schedule(request(2, 20))
        assert total(alone) == 30
        fed = instance.batches[-1]
        assert fed["READY"].ravel().tolist() == [0, 1]
        assert fed["START"].ravel().tolist() == [0, 0] and fed["CORRID"].ravel().tolist() == [0, 2]
        last = await asyncio.gather(
            batcher.schedule(request(1, 2, end=True)), batcher.schedule(request(2, 30, end=True))
        )
        assert [total(a) for a in last] == [3, 60]
        assert last[0]["CONTROLS"].tolist() == [[0, 1, 1]]  # START, READY, END as the model saw them
        assert set(last[0]) == set(OUTPUTS)  # the state output is not answered

    run(body)
    batcher.close()
    assert statistics.execution_count == 3
    assert statistics.inference_count == 5  # not-ready rows are not inferences


def test_a_start_on_a_running_sequence_begins_again_from_the_initial_state() -> None:
    batcher, _, _, _ = build()

    async def body() -> None:
        await batcher.schedule(request(5, 4, start=True))
        assert total(await batcher.schedule(request(5, 1))) == 5
        assert total(await batcher.schedule(request(5, 1, start=True))) == 1

    run(body)
    batcher.close()


def test_sequences_beyond_the_slots_wait_in_the_backlog_until_one_ends() -> None:
    batcher, (instance,), _, _ = build(max_batch_size=1)

    async def body() -> None:
        await batcher.schedule(request(1, 1, start=True))
        waiting = asyncio.ensure_future(batcher.schedule(request(2, 100, start=True)))
        await asyncio.sleep(0.05)
        assert not waiting.done()  # the only slot is sequence 1's
        assert total(await batcher.schedule(request(1, 1, end=True))) == 2
        assert total(await waiting) == 100
        assert instance.batches[-1]["START"].ravel().tolist() == [1]

    run(body)
    batcher.close()


def test_oldest_batches_the_next_requests_of_the_oldest_sequences() -> None:
    batcher, (instance,), _, _ = build(
        max_batch_size=2, strategy="oldest { max_candidate_sequences: 3 max_queue_delay_microseconds: 20000 }"
    )

    async def body() -> None:
        starts = [batcher.schedule(request(sid, sid, start=True)) for sid in (1, 2, 3)]
        assert [total(a) for a in await asyncio.gather(*starts)] == [1, 2, 3]
        assert sorted(len(b["INPUT"]) for b in instance.batches) == [1, 2]
        assert all(b["READY"].all() for b in instance.batches)  # no not-ready rows in oldest
        steps = [batcher.schedule(request(sid, 10, end=True)) for sid in (3, 1, 2)]
        assert [total(a) for a in await asyncio.gather(*steps)] == [13, 11, 12]

    run(body)
    batcher.close()


def test_state_spreads_over_instances() -> None:
    batcher, instances, _, _ = build(instances=2, max_batch_size=1)

    async def body() -> None:
        starts = await asyncio.gather(*(batcher.schedule(request(s, s, start=True)) for s in (1, 2)))
        assert [total(a) for a in starts] == [1, 2]
        assert [len(i.batches) for i in instances] == [1, 1]
        steps = await asyncio.gather(*(batcher.schedule(request(s, 5, end=True)) for s in (1, 2)))
        assert [total(a) for a in steps] == [6, 7]

    run(body)
    batcher.close()


def test_idle_sequences_are_released() -> None:
    batcher, _, _, _ = build(idle_us=50_000)

    async def body() -> None:
        await batcher.schedule(request(9, 1, start=True))
        await asyncio.sleep(0.02)
        assert total(await batcher.schedule(request(9, 1))) == 2  # used again within the idle time
        await asyncio.sleep(0.12)
        with pytest.raises(InvalidArgumentError, match="must specify the START flag"):
            await batcher.schedule(request(9, 1))

    run(body)
    batcher.close()


def test_string_correlation_ids_reach_a_string_corrid() -> None:
    batcher, _, _, _ = build(corrid=TensorProto.STRING)

    async def body() -> None:
        answer = await batcher.schedule(request("user-1", 3, start=True))
        assert answer["CORRID_OUT"].ravel().tolist() == ["user-1"]
        with pytest.raises(InvalidArgumentError) as refused:
            await batcher.schedule(request(7, 1, start=True))
        assert refused.value.message.startswith(
            "sequence batching control 'CORRID' data-type is 'UINT64', but model 'acc' expects 'STRING'"
        )

    run(body)
    batcher.close()


def test_requests_a_sequence_model_refuses() -> None:
    batcher, _, _, _ = build()

    async def body() -> None:
        with pytest.raises(InvalidArgumentError) as refused:
            await batcher.schedule(ScheduledRequest({"INPUT": np.zeros((1, 1), np.float32)}, OUTPUTS, 1, {}))
        assert refused.value.message.startswith(
            "inference request to model 'acc' must specify a non-zero or non-empty correlation ID"
        )
        two_rows = ScheduledRequest({"INPUT": np.zeros((2, 1), np.float32)}, OUTPUTS, 2, {"sequence_id": 1})
        with pytest.raises(
            InvalidArgumentError, match="must specify batch-size 1 due to requirements of sequence"
        ):
            await batcher.schedule(two_rows)
        with pytest.raises(
            InvalidArgumentError, match="data-type is 'STRING', but model 'acc' expects 'UINT64'"
        ):
            await batcher.schedule(request("id", 1, start=True))

    run(body)
    batcher.close()


def test_close_answers_waiting_requests_503() -> None:
    batcher, _, _, _ = build(max_batch_size=1)

    async def body() -> None:
        await batcher.schedule(request(1, 1, start=True))
        waiting = asyncio.ensure_future(batcher.schedule(request(2, 1, start=True)))
        await asyncio.sleep(0.01)
        batcher.close()
        with pytest.raises(UnavailableError, match="unloading"):
            await waiting

    run(body)


class RequestList:
    """An instance that takes its batch as a list of requests, as Python-backend instances do."""

    def __init__(self) -> None:
        self.batches: list[list[ScheduledRequest]] = []

    async def execute(
        self, requests: list[ScheduledRequest]
    ) -> tuple[list[dict[str, np.ndarray]], ExecutionTiming]:
        self.batches.append(requests)
        answers = []
        for r in requests:
            kept = r.inputs["STATE_IN"] * (1 - r.inputs["START"])
            answers.append({"OUTPUT": kept + r.inputs["INPUT"], "STATE_OUT": kept + r.inputs["INPUT"]})
        return answers, ExecutionTiming()


def test_request_list_instances_get_answered_rows_with_controls_and_parameters() -> None:
    config = parse_config(accumulator_config("acc"))
    config.input.add(name="INPUT", data_type=mc.TYPE_FP32, dims=[1])
    config.output.add(name="OUTPUT", data_type=mc.TYPE_FP32, dims=[1])
    instance = RequestList()
    batcher = create_scheduler(config, InstancePool([instance], "acc"), ModelStatistics("acc", "1"))

    def ask(sequence_id: int, value: float, start: bool = False) -> ScheduledRequest:
        parameters = {"sequence_id": sequence_id, "sequence_start": start, "sequence_end": False}
        return ScheduledRequest({"INPUT": np.array([[value]], np.float32)}, ["OUTPUT"], 1, parameters)

    async def body() -> None:
        await asyncio.gather(batcher.schedule(ask(1, 1, start=True)), batcher.schedule(ask(2, 5, start=True)))
        assert total(await batcher.schedule(ask(2, 5))) == 10
        last = instance.batches[-1]
        assert len(last) == 1  # slot 0 had nothing: no not-ready request is sent
        assert last[0].parameters["sequence_id"] == 2 and last[0].parameters["sequence_start"] is False
        assert last[0].inputs["READY"].tolist() == [[1]] and last[0].inputs["CORRID"].tolist() == [[2]]
        assert "STATE_OUT" in last[0].output_names

    run(body)
    batcher.close()
