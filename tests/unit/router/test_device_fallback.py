"""The CPU fallback on a device error at run time, with an injected failing GPU instance.

This machine has no GPU, so the GPU instance is a stand-in that fails as ONNX Runtime's CUDA provider
does (an ``InternalError`` carrying CUDA's words); the CPU instance is a real ONNX Runtime session.
Everything between them is the server's own: its scheduler, the router's move, the answer's marks.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
from tritonclient.grpc import model_config_pb2 as mc

from conch.backends import onnxruntime as ort_backend
from conch.backends.placement import Placement
from conch.core.errors import InternalError
from conch.core.types import ExecutionTiming, InferenceRequest, Tensor
from conch.models.fallback import FallbackPolicy, is_device_error
from conch.models.model import Model, ModelState, ModelVersion
from conch.models.served_models import ServedModels
from conch.models.strategy import FallbackLevel
from conch.scheduling import create_scheduler
from conch.scheduling.instance_pool import InstancePool
from conch.scheduling.scheduler import Scheduler
from conch.server import InferenceServer
from tests.fixtures.onnx_models import scale_model

CUDA_OOM = "model 'm' version 1 failed while running: CUDA failure 2: out of memory ; GPU=0"


class FailingGpuInstance:
    """An instance whose device has gone: every run fails with CUDA's out-of-memory error."""

    def __init__(self) -> None:
        self.runs = 0

    def run(
        self, inputs: dict[str, np.ndarray], names: list[str], timing: ExecutionTiming
    ) -> dict[str, np.ndarray]:
        self.runs += 1
        raise InternalError(CUDA_OOM)


def served_version(tmp_path: Path, gpu: FailingGpuInstance, with_cpu: bool) -> ModelVersion:
    model_file = tmp_path / "model.onnx"
    model_file.write_bytes(scale_model(3.0).SerializeToString())
    config = mc.ModelConfig(name="m", max_batch_size=4)
    session = ort_backend.open_session(model_file, config, Placement(), 1)
    signature = ort_backend.read_signature(session)
    for tensor in signature.inputs:
        config.input.add(name=tensor.name, data_type=mc.TYPE_FP32, dims=[4])
    for tensor in signature.outputs:
        config.output.add(name=tensor.name, data_type=mc.TYPE_FP32, dims=[4])
    version = ModelVersion("m", 1, config)
    version.state = ModelState.READY
    version.scheduler = create_scheduler(config, InstancePool([gpu], "m-1"), version.statistics)

    def on_cpu() -> Scheduler:
        instance = ort_backend.OnnxRuntimeInstance(session, config)
        return create_scheduler(config, InstancePool([instance], "m-1-cpu"), version.statistics)

    version.cpu_fallback = on_cpu if with_cpu else None
    return version


def server_for(version: ModelVersion) -> InferenceServer:
    repository = ServedModels(Path("."))
    repository.models["m"] = Model("m", versions={1: version}, fallback=FallbackPolicy((FallbackLevel.CPU,)))
    server = InferenceServer(repository)
    server.started = True
    return server


def request() -> InferenceRequest:
    return InferenceRequest("m", inputs=[Tensor("INPUT0", "FP32", np.ones((2, 4), np.float32))])


def test_device_errors_are_told_from_other_failures_by_their_words() -> None:
    assert is_device_error(CUDA_OOM)
    assert is_device_error("CUBLAS_STATUS_EXECUTION_FAILED when calling cublasSgemm")
    assert is_device_error("an illegal memory access was encountered")
    assert not is_device_error("model 'm' failed while running: Reshape: input has 4 values, shape asks 9")


def test_a_device_error_moves_the_version_to_cpu_and_the_request_is_answered(tmp_path: Path) -> None:
    gpu = FailingGpuInstance()
    version = served_version(tmp_path, gpu, with_cpu=True)
    server = server_for(version)

    async def two_calls() -> tuple[object, object]:
        first = await server.infer(request())
        second = await server.infer(request())
        return first, second

    first, second = asyncio.run(two_calls())

    assert gpu.runs == 1, "the GPU instance is not used again once the version moved"
    for answer in (first, second):
        np.testing.assert_array_equal(answer.outputs[0].data, np.full((2, 4), 3.0, np.float32))  # type: ignore[attr-defined]
        assert answer.parameters == {"fallback_level": "CPU", "fallback_reason": "device_error"}  # type: ignore[attr-defined]
    assert server.router.fallbacks[("m", "1", "CPU", "device_error")] == 2
    assert version.fallback_marker == (FallbackLevel.CPU, version.fallback_marker[1])


def test_requests_failing_together_share_one_move(tmp_path: Path) -> None:
    gpu = FailingGpuInstance()
    version = served_version(tmp_path, gpu, with_cpu=True)
    server = server_for(version)
    built = []
    factory = version.cpu_fallback
    assert factory is not None

    def counted() -> Scheduler:
        built.append(1)
        return factory()

    version.cpu_fallback = counted

    async def many() -> list[object]:
        return await asyncio.gather(*(server.infer(request()) for _ in range(8)), return_exceptions=True)

    answers = asyncio.run(many())

    assert len(built) == 1
    assert all(not isinstance(a, Exception) for a in answers), answers


def test_without_cpu_in_the_strategy_the_device_error_is_the_requests_500(tmp_path: Path) -> None:
    version = served_version(tmp_path, FailingGpuInstance(), with_cpu=False)
    server = server_for(version)

    with pytest.raises(InternalError, match="CUDA failure 2: out of memory"):
        asyncio.run(server.infer(request()))
