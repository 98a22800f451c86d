"""Deep health's rules apart from its machinery: the decision from readings, the shared and cached
evaluation under a fake clock, and the probe's inputs."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from conch.frontends.http.deep_health import (
    Check,
    DeepHealthSettings,
    Evaluation,
    GpuReading,
    ProbeReading,
    Readings,
    SharedResult,
    Status,
    healthy,
    judge,
    probe_inputs,
)

SETTINGS = DeepHealthSettings(probe_timeout_ms=1000, max_memory_ratio=0.95, max_gpu_memory_ratio=0.90)


def readings(**changes: object) -> Readings:
    base: dict[str, object] = {
        "loop_delay_s": 0.0001,
        "probes": (ProbeReading("a", 1, 0.002), ProbeReading("b", 2, 0.003)),
        "memory_ratio": 0.40,
        "gpus": (GpuReading("GPU-0", used_bytes=10, total_bytes=100),),
    }
    return Readings(**{**base, **changes})  # type: ignore[arg-type]


def failed(checks: list[Check]) -> list[str]:
    return [check.name for check in checks if not check.ok]


def test_every_reading_within_its_limit_is_healthy_with_one_check_each() -> None:
    checks = judge(readings(), SETTINGS)

    assert [c.name for c in checks] == [
        "event_loop",
        "model:a/1",
        "model:b/2",
        "host_memory",
        "gpu_memory:GPU-0",
    ]
    assert {c.status for c in checks} == {Status.PASS}
    assert healthy(checks)


@pytest.mark.parametrize(
    ("changes", "names"),
    [
        ({"loop_delay_s": 1.5}, ["event_loop"]),
        ({"probes": (ProbeReading("a", 1, 1.0, timed_out=True), ProbeReading("b", 2, 0.1))}, ["model:a/1"]),
        ({"probes": (ProbeReading("a", 1, 0.1), ProbeReading("b", 2, 0.1, error="boom"))}, ["model:b/2"]),
        ({"memory_ratio": 0.96}, ["host_memory"]),
        ({"gpus": (GpuReading("GPU-0", 91, 100), GpuReading("GPU-1", 1, 100))}, ["gpu_memory:GPU-0"]),
        ({"gpus": (GpuReading("GPU-0", error="GPU is lost"),)}, ["gpu_memory:GPU-0"]),
        (
            {
                "loop_delay_s": 2.0,
                "memory_ratio": 1.0,
                "probes": (ProbeReading("a", 1, 1.0, timed_out=True),),
            },
            ["event_loop", "model:a/1", "host_memory"],
        ),
    ],
)
def test_each_reading_over_its_limit_fails_its_own_check(
    changes: dict[str, object], names: list[str]
) -> None:
    checks = judge(readings(**changes), SETTINGS)

    assert failed(checks) == names
    assert not healthy(checks)


def test_a_reading_at_its_limit_passes() -> None:
    checks = judge(readings(loop_delay_s=1.0, memory_ratio=0.95, gpus=(GpuReading("G", 90, 100),)), SETTINGS)

    assert healthy(checks)


def test_a_model_with_no_ready_version_is_reported_and_does_not_fail() -> None:
    checks = judge(readings(probes=(ProbeReading("gone", None), ProbeReading("a", 1, 0.1))), SETTINGS)

    gone = next(c for c in checks if c.name == "model:gone")
    assert gone.status is Status.NOT_READY
    assert gone.ok
    assert healthy(checks)


def test_the_details_say_what_was_measured_against_what() -> None:
    probes = (ProbeReading("a", 1, 1.2, timed_out=True), ProbeReading("b", 1, 0.1, error="model 'b' failed"))
    checks = {c.name: c for c in judge(readings(probes=probes, memory_ratio=0.5), SETTINGS)}

    assert checks["model:a/1"].detail == "no answer within 1000 ms"
    assert checks["model:b/1"].detail == "the probe inference failed: model 'b' failed"
    assert checks["host_memory"].detail == "host memory 50.00% used; limit 95.00%"


def test_the_json_names_every_failed_check() -> None:
    checks = judge(readings(memory_ratio=0.99, loop_delay_s=5.0), SETTINGS)
    document = Evaluation(3, 1700000000.0, 0.01, tuple(checks)).to_json()

    assert document["healthy"] is False
    assert document["failed"] == ["event_loop", "host_memory"]
    assert document["evaluation"] == 3
    assert {c["name"]: c["ok"] for c in document["checks"]}["model:a/1"] is True
    assert set(document["checks"][0]) == {"name", "ok", "status", "detail", "seconds"}


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class CountingProducer:
    """Counts evaluations; with ``gate`` set, each waits for it, so callers overlap."""

    def __init__(self, gate: asyncio.Event | None = None) -> None:
        self.calls = 0
        self.gate = gate
        self.fail_next = False

    async def __call__(self) -> int:
        self.calls += 1
        if self.gate is not None:
            await self.gate.wait()
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("evaluation failed")
        return self.calls


def test_a_result_is_reused_until_ttl_has_passed_since_it_finished() -> None:
    async def scenario() -> list[int]:
        clock, produce = FakeClock(), CountingProducer()
        shared = SharedResult(produce, ttl_s=5, clock=clock)
        got = [await shared.get()]
        clock.now += 4.9
        got.append(await shared.get())
        clock.now += 0.1
        got.append(await shared.get())
        return got

    assert asyncio.run(scenario()) == [1, 1, 2]


def test_concurrent_callers_share_the_one_evaluation_in_flight() -> None:
    async def scenario() -> tuple[list[int], int]:
        gate = asyncio.Event()
        produce = CountingProducer(gate)
        shared = SharedResult(produce, ttl_s=0, clock=FakeClock())
        callers = [asyncio.create_task(shared.get()) for _ in range(20)]
        await asyncio.sleep(0)
        gate.set()
        return list(await asyncio.gather(*callers)), produce.calls

    results, calls = asyncio.run(scenario())

    assert calls == 1
    assert results == [1] * 20


def test_with_ttl_0_each_call_after_the_last_evaluates_again() -> None:
    async def scenario() -> list[int]:
        shared = SharedResult(CountingProducer(), ttl_s=0, clock=FakeClock())
        return [await shared.get(), await shared.get()]

    assert asyncio.run(scenario()) == [1, 2]


def test_a_failed_evaluation_is_not_kept() -> None:
    async def scenario() -> int:
        produce = CountingProducer()
        produce.fail_next = True
        shared = SharedResult(produce, ttl_s=60, clock=FakeClock())
        with pytest.raises(RuntimeError):
            await shared.get()
        return await shared.get()

    assert asyncio.run(scenario()) == 2


def test_a_caller_that_gives_up_does_not_cancel_the_others_evaluation() -> None:
    async def scenario() -> tuple[int, int]:
        gate = asyncio.Event()
        produce = CountingProducer(gate)
        shared = SharedResult(produce, ttl_s=60, clock=FakeClock())
        quitter, stayer = asyncio.create_task(shared.get()), asyncio.create_task(shared.get())
        await asyncio.sleep(0)
        quitter.cancel()
        await asyncio.sleep(0)
        gate.set()
        return await stayer, produce.calls

    assert asyncio.run(scenario()) == (1, 1)


def parse(text: str) -> mc.ModelConfig:
    return text_format.Parse(text, mc.ModelConfig())


def test_zeros_take_the_config_shapes_with_a_batch_of_one_and_minus_one_as_one(tmp_path: Path) -> None:
    config = parse(
        'max_batch_size: 8 input [{ name: "X" data_type: TYPE_FP32 dims: [-1, 3] },'
        ' { name: "T" data_type: TYPE_STRING dims: [2] }]'
    )

    inputs = probe_inputs(config, tmp_path)

    assert inputs["X"].shape == (1, 1, 3)
    assert inputs["X"].dtype == np.float32
    assert not inputs["X"].any()
    assert inputs["T"].shape == (1, 2)
    assert inputs["T"].tolist() == [[b"", b""]]


def test_a_model_without_batching_gets_the_config_shape_alone(tmp_path: Path) -> None:
    inputs = probe_inputs(parse('input [{ name: "X" data_type: TYPE_INT32 dims: [2, 3] }]'), tmp_path)

    assert inputs["X"].shape == (2, 3)
    assert inputs["X"].dtype == np.int32


def test_the_first_warm_up_sample_is_used_one_row_of_it(tmp_path: Path) -> None:
    (tmp_path / "warmup").mkdir()
    (tmp_path / "warmup" / "x").write_bytes(np.array([7, 8], dtype="<i8").tobytes())
    config = parse(
        'max_batch_size: 8 input [{ name: "X" data_type: TYPE_INT64 dims: [2] }]'
        ' model_warmup [{ name: "from_file" batch_size: 4'
        '   inputs { key: "X" value: { data_type: TYPE_INT64 dims: [2] input_data_file: "x" } } },'
        ' { name: "second" batch_size: 1'
        '   inputs { key: "X" value: { data_type: TYPE_INT64 dims: [2] zero_data: true } } }]'
    )

    inputs = probe_inputs(config, tmp_path)

    assert inputs["X"].tolist() == [[7, 8]]
