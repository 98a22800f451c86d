"""The PyTorch backend against torch itself on the CPU: programs read back, configs completed and
refused, instances that answer as the eager model does, fp16 and channels-last, and the builder's
KIND_GPU rule and load phases through a real :class:`ModelLoader`."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
import torch
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from conch.backends.kinds import BackendKind
from conch.backends.pytorch.binding import bind
from conch.backends.pytorch.instance import PyTorchInstance
from conch.backends.pytorch.options import PyTorchOptions
from conch.backends.pytorch.program import load_program
from conch.core.errors import InternalError, InvalidArgumentError
from conch.core.types import ExecutionTiming, InferenceRequest, Tensor
from conch.lifecycle.builders.pytorch_models import PyTorchModelBuilder, complete_config, cpu_build
from conch.lifecycle.loader import LoadOptions, ModelLoader
from conch.models.fallback import FallbackPolicy, is_device_error
from conch.models.model import Model, ModelState, ModelVersion
from conch.models.served_models import ServedModels
from conch.models.strategy import FallbackLevel
from conch.observability.model_loads import MODEL_LOADS
from conch.scheduling import create_scheduler
from conch.scheduling.instance_pool import InstancePool
from conch.server import InferenceServer
from conch.validation.validator import validate_model
from tests.fixtures.pytorch_models import CNN_INPUT, cnn_config, write_exported_mlp, write_torchscript_cnn

pytestmark = pytest.mark.torch  # the program this file drives


def parsed(text: str) -> mc.ModelConfig:
    return text_format.Parse(text, mc.ModelConfig())


def loader() -> ModelLoader:
    result = ModelLoader(LoadOptions())
    result.builders[BackendKind.PYTORCH] = PyTorchModelBuilder(result.options)
    return result


def test_an_exported_program_tells_its_tensors_with_the_dynamic_batch(tmp_path: Path) -> None:
    write_exported_mlp(tmp_path)
    program = load_program(torch, tmp_path / "model.pt2")

    assert program.exported and program.argument_names == ("features",)
    assert program.signature is not None
    assert [(t.name, t.datatype, t.shape) for t in program.signature.inputs] == [
        ("features", "FP32", (None, 6))
    ]
    assert [(t.name, t.shape) for t in program.signature.outputs] == [
        ("OUTPUT__0", (None, 3)),
        ("OUTPUT__1", (None, 3)),
    ]


def test_a_static_batch_program_completes_without_batching(tmp_path: Path) -> None:
    write_exported_mlp(tmp_path, dynamic_batch=False)
    program = load_program(torch, tmp_path / "model.pt2")
    config = mc.ModelConfig(name="m")

    complete_config(config, program, set(), default_max_batch_size=4)

    assert config.max_batch_size == 0
    assert list(config.input[0].dims) == [2, 6]


def test_a_config_that_disagrees_with_the_program_is_refused(tmp_path: Path) -> None:
    write_exported_mlp(tmp_path)
    program = load_program(torch, tmp_path / "model.pt2")
    config = parsed(
        'name: "m" max_batch_size: 4 input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 7 ] } ]'
        ' output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 3 ] } ]'
    )

    with pytest.raises(InvalidArgumentError, match=r"config input 'INPUT__0' dims \[7\]"):
        complete_config(config, program, {"max_batch_size", "input", "output"}, 4)


def test_a_file_that_is_not_a_program_is_a_load_error_without_its_path(tmp_path: Path) -> None:
    (tmp_path / "model.pt").write_bytes(b"not a zip archive")

    with pytest.raises(InvalidArgumentError) as raised:
        load_program(torch, tmp_path / "model.pt")

    assert raised.value.message.startswith("model.pt is not a loadable TorchScript module (write it with")
    assert str(tmp_path) not in raised.value.message


def test_a_torchscript_file_named_pt2_is_a_load_error_saying_how_each_is_written(tmp_path: Path) -> None:
    write_torchscript_cnn(tmp_path, filename="model.pt2")

    with pytest.raises(InvalidArgumentError) as raised:
        load_program(torch, tmp_path / "model.pt2")

    assert raised.value.message.startswith(
        "model.pt2 is not a loadable torch.export program (write it with torch.export.save; "
        "TorchScript files are model.pt)"
    )


def cnn_instance(tmp_path: Path, options: PyTorchOptions) -> tuple[PyTorchInstance, torch.nn.Module]:
    eager = write_torchscript_cnn(tmp_path)
    program = load_program(torch, tmp_path / "model.pt")
    config = parsed(cnn_config("cnn"))
    complete_config(config, program, {"max_batch_size", "input", "output"}, 4)
    module = program.module
    if options.half:
        module = module.half()
    if options.channels_last:
        module = module.to(memory_format=torch.channels_last)
    instance = PyTorchInstance(torch, module, bind(config, program), "cpu", options, "model 'cnn' version 1")
    return instance, eager


@pytest.mark.filterwarnings("ignore:The given NumPy array is not writable:UserWarning")
def test_an_instance_answers_as_the_eager_model_in_eval_mode(tmp_path: Path) -> None:
    instance, eager = cnn_instance(tmp_path, PyTorchOptions())
    batch = np.random.default_rng(0).standard_normal((4, *CNN_INPUT), dtype=np.float32)
    batch.flags.writeable = False  # as decoded from the wire

    timing = ExecutionTiming()
    outputs = instance.run({"INPUT__0": batch}, ["OUTPUT__0"], timing)

    with torch.inference_mode():
        expected = eager(torch.from_numpy(batch.copy())).numpy()
    np.testing.assert_allclose(outputs["OUTPUT__0"], expected, rtol=1e-5, atol=1e-6)
    assert outputs["OUTPUT__0"].dtype == np.float32
    assert timing.compute_infer_ns > 0


def test_fp16_and_channels_last_stay_close_and_answer_in_the_configs_datatype(tmp_path: Path) -> None:
    exact, _ = cnn_instance(tmp_path / "fp32", PyTorchOptions())
    half, _ = cnn_instance(tmp_path / "fp16", PyTorchOptions(half=True, channels_last=True))
    batch = np.random.default_rng(1).standard_normal((2, *CNN_INPUT), dtype=np.float32)

    reference = exact.run({"INPUT__0": batch}, ["OUTPUT__0"], ExecutionTiming())["OUTPUT__0"]
    approximate = half.run({"INPUT__0": batch}, ["OUTPUT__0"], ExecutionTiming())["OUTPUT__0"]

    assert approximate.dtype == np.float32  # cast back before it leaves the instance
    np.testing.assert_allclose(approximate, reference, rtol=2e-2, atol=2e-2)
    assert not np.array_equal(approximate, reference)  # it did run in half precision


def test_a_run_that_fails_inside_torchscript_is_a_500_without_the_interpreters_paths(tmp_path: Path) -> None:
    instance, _ = cnn_instance(tmp_path, PyTorchOptions())
    wrong = np.zeros((1, 5, 8, 8), dtype=np.float32)  # 5 channels where the conv takes 3

    with pytest.raises(InternalError) as raised:
        instance.run({"INPUT__0": wrong}, ["OUTPUT__0"], ExecutionTiming())

    assert raised.value.message.startswith("model 'cnn' version 1 failed while running: ")
    assert "site-packages" not in raised.value.message and ".py" not in raised.value.message


def write_model(root: Path, name: str, extra: str) -> Path:
    write_torchscript_cnn(root / name / "1")
    (root / name / "config.pbtxt").write_text(cnn_config(name, extra))
    return root / name


@pytest.mark.skipif(torch.cuda.is_available(), reason="describes a machine without CUDA")
def test_kind_gpu_without_cuda_loads_only_with_the_cpu_fallback(tmp_path: Path) -> None:
    strict = loader().load(write_model(tmp_path, "strict", "instance_group [ { kind: KIND_GPU } ]"))
    fallback = loader().load(
        write_model(
            tmp_path,
            "fallback",
            "instance_group [ { kind: KIND_GPU count: 2 } ]\n"
            'parameters { key: "FALLBACK_STRATEGY" value { string_value: "CPU" } }',
        )
    )

    assert strict.versions[1].state is ModelState.UNAVAILABLE
    assert "PyTorch sees no CUDA device" in strict.versions[1].reason
    version = fallback.versions[1]
    assert version.state is ModelState.READY
    assert version.statistics.gpu_fallback_instances == 2
    assert version.fallback_marker[1] is not None and version.fallback_marker[1].value == "gpu_unavailable"
    assert version.cpu_fallback is None  # it already runs on the CPU
    version.close()


def test_a_load_records_its_context_and_warmup_phases(tmp_path: Path) -> None:
    model = loader().load(
        write_model(
            tmp_path,
            "phased",
            'model_warmup [ { name: "zeros" batch_size: 2 count: 3 inputs { key: "INPUT__0" value {'
            " data_type: TYPE_FP32 dims: [ 3, 8, 8 ] zero_data: true } } } ]",
        )
    )

    assert model.versions[1].ready
    phases = MODEL_LOADS.snapshot()["phased"].phases
    assert sorted(phases) == ["context", "warmup"]
    assert sum(phases["context"].counts) == 1 and sum(phases["warmup"].counts) == 1
    assert phases["warmup"].sum > 0
    model.versions[1].close()


def test_every_version_of_a_model_shares_the_models_turns_on_the_event_loop(tmp_path: Path) -> None:
    # The pool is keyed by the model's name, as ONNX and Python models' pools are: during a release the
    # two versions' executions count as one model's, not as another model's that keeps both off the loop.
    write_torchscript_cnn(tmp_path / "twins" / "2")
    model = loader().load(write_model(tmp_path, "twins", "version_policy: { all: {} }"))

    pools = [model.versions[number].scheduler._pool for number in (1, 2)]  # type: ignore[union-attr]
    assert [pool.model for pool in pools] == ["twins", "twins"]
    for version in model.versions.values():
        version.close()


def test_a_torchscript_output_beyond_its_results_fails_the_warmup(tmp_path: Path) -> None:
    folder = write_model(
        tmp_path,
        "too-many",
        'model_warmup [ { name: "zeros" batch_size: 1 inputs { key: "INPUT__0" value {'
        " data_type: TYPE_FP32 dims: [ 3, 8, 8 ] zero_data: true } } } ]",
    )
    text = (folder / "config.pbtxt").read_text().replace('"OUTPUT__0"', '"OUTPUT__1"')
    (folder / "config.pbtxt").write_text(text)

    version = loader().load(folder).versions[1]

    assert version.state is ModelState.UNAVAILABLE
    assert "warm-up sample 'zeros' failed" in version.reason
    assert "returned 1 result(s), but output 'OUTPUT__1' is result 1" in version.reason


def test_conch_validate_checks_a_pytorch_models_identity_and_versions_only(tmp_path: Path) -> None:
    findings = validate_model(write_model(tmp_path, "cnn", ""))

    assert [f for f in findings if f.is_error] == []


class OutOfMemoryOnGpu:
    """A GPU instance over its memory cap: every run fails as PyTorchInstance reports CUDA's OOM."""

    def run(
        self, inputs: dict[str, np.ndarray], names: list[str], timing: ExecutionTiming
    ) -> dict[str, np.ndarray]:
        raise InternalError(
            "model 'cnn' version 1 ran out of GPU memory on cuda:0: CUDA out of memory. Tried to allocate"
        )


def test_a_gpu_out_of_memory_moves_the_version_to_itscpu_build(tmp_path: Path) -> None:
    eager = write_torchscript_cnn(tmp_path / "cnn" / "1")
    config = parsed(cnn_config("cnn"))
    version = ModelVersion("cnn", 1, config)
    version.state = ModelState.READY
    version.scheduler = create_scheduler(
        config, InstancePool([OutOfMemoryOnGpu()], "cnn-1"), version.statistics
    )
    settings = PyTorchOptions(half=True, channels_last=True)
    version.cpu_fallback = cpu_build(torch, tmp_path / "cnn" / "1" / "model.pt", version, settings, 2, "cnn")
    repository = ServedModels(tmp_path)
    repository.models["cnn"] = Model(
        "cnn", versions={1: version}, fallback=FallbackPolicy((FallbackLevel.CPU,))
    )
    server = InferenceServer(repository)
    server.started = True
    batch = np.random.default_rng(2).standard_normal((2, *CNN_INPUT), dtype=np.float32)

    answer = asyncio.run(server.infer(InferenceRequest("cnn", inputs=[Tensor("INPUT__0", "FP32", batch)])))

    with torch.inference_mode():
        expected = eager(torch.from_numpy(batch)).numpy()
    np.testing.assert_allclose(answer.outputs[0].data, expected, rtol=1e-5, atol=1e-6)  # fp32 on the CPU
    assert answer.parameters == {"fallback_level": "CPU", "fallback_reason": "device_error"}
    version.close()


class FailsLikeCuda(torch.nn.Module):
    """Raises CUDA's words followed by its advice lines, as a kernel fault does inside TorchScript."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError(
            "CUDA error: an illegal memory access was encountered\n"
            "For debugging consider passing CUDA_LAUNCH_BLOCKING=1"
        )


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
def test_a_cuda_error_keeps_cudas_words_so_the_fallback_sees_a_device_error(tmp_path: Path) -> None:
    torch.jit.script(FailsLikeCuda()).save(str(tmp_path / "model.pt"))
    program = load_program(torch, tmp_path / "model.pt")
    config = parsed(
        'name: "m" max_batch_size: 0 input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 2 ] } ]'
        ' output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 2 ] } ]'
    )
    instance = PyTorchInstance(torch, program.module, bind(config, program), "cpu", PyTorchOptions(), "m")

    with pytest.raises(InternalError) as raised:
        instance.run({"INPUT__0": np.zeros(2, np.float32)}, ["OUTPUT__0"], ExecutionTiming())

    assert (
        raised.value.message
        == "m failed while running: RuntimeError: CUDA error: an illegal memory access was encountered"
    )
    assert is_device_error(raised.value.message)


def test_an_input_beyond_an_exported_programs_guards_is_a_400(tmp_path: Path) -> None:
    write_exported_mlp(tmp_path)  # batch dimension exported with max=1024
    program = load_program(torch, tmp_path / "model.pt2")
    config = parsed('name: "mlp" max_batch_size: 4096')
    complete_config(config, program, {"max_batch_size"}, 4)
    instance = PyTorchInstance(torch, program.module, bind(config, program), "cpu", PyTorchOptions(), "mlp")

    with pytest.raises(InvalidArgumentError) as raised:
        instance.run({"features": np.zeros((2000, 6), np.float32)}, ["OUTPUT__0"], ExecutionTiming())

    assert raised.value.message == "mlp rejected the input: Guard failed: features.size()[0] <= 1024"
