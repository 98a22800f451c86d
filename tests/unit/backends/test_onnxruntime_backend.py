"""The ONNX Runtime backend on real sessions built from the test models in tests/fixtures."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from tritonclient.grpc import model_config_pb2 as mc

from conch.backends import onnxruntime as onnxruntime_backend
from conch.backends.onnxruntime import (
    OnnxRuntimeInstance,
    default_intra_op_threads,
    open_session,
    ort_message,
    read_signature,
    session_options,
    session_runner,
)
from conch.backends.signature import TensorSignature
from conch.core import datatypes
from conch.core.errors import InternalError, InvalidArgumentError
from conch.core.types import ExecutionTiming
from conch.core.usable_cores import usable_cores
from conch.repository.autocomplete import complete_defaults, complete_from_signature
from conch.repository.config import fields_set_in_text, parse_config
from tests.fixtures.onnx_models import (
    ONNX_TYPES,
    add_sub_model,
    fixed_shape_model,
    identity_model,
    multi_dtype_model,
    reshape_model,
    string_model,
    variable_dims_model,
)


def save(model: onnx.ModelProto, folder: Path) -> Path:
    path = folder / "model.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def instance(model: onnx.ModelProto, folder: Path, text: str = "") -> OnnxRuntimeInstance:
    """An instance the way the repository builds one: open, complete the config from the graph, wrap."""
    config = parse_config(text)
    fields = fields_set_in_text(config, text)
    complete_defaults(config, "m")
    session = open_session(save(model, folder), config)
    complete_from_signature(config, read_signature(session), fields)
    return OnnxRuntimeInstance(session, config)


def run(model: OnnxRuntimeInstance, outputs: list[str], **inputs: np.ndarray) -> dict[str, np.ndarray]:
    return model.run(inputs, outputs, ExecutionTiming())


def with_parameters(**parameters: str) -> mc.ModelConfig:
    config = mc.ModelConfig()
    for key, value in parameters.items():
        config.parameters[key].string_value = value
    return config


def test_read_signature_of_a_batching_model(tmp_path: Path) -> None:
    session = open_session(save(multi_dtype_model(), tmp_path), mc.ModelConfig())

    signature = read_signature(session)

    assert signature.inputs == (
        TensorSignature("A", "INT32", (None, 3)),
        TensorSignature("B", "FP64", (None, 2)),
    )
    assert signature.outputs == (
        TensorSignature("A_PLUS_ONE", "INT32", (None, 3)),
        TensorSignature("B_SUM", "FP64", (None,)),
        TensorSignature("B_DOUBLE", "FP64", (None, 2)),
    )


def test_read_signature_of_fixed_and_variable_shapes(tmp_path: Path) -> None:
    (tmp_path / "fixed").mkdir()
    (tmp_path / "variable").mkdir()
    fixed = read_signature(open_session(save(fixed_shape_model(), tmp_path / "fixed"), mc.ModelConfig()))
    variable = read_signature(
        open_session(save(variable_dims_model(), tmp_path / "variable"), mc.ModelConfig())
    )

    assert fixed.inputs == (TensorSignature("X", "FP32", (2, 3)),)
    assert variable.outputs == (TensorSignature("Y", "FP32", (None, None)),)


@pytest.mark.parametrize("datatype", sorted(ONNX_TYPES))
def test_every_datatype_through_an_identity_model(tmp_path: Path, datatype: str) -> None:
    model = instance(identity_model(ONNX_TYPES[datatype]), tmp_path)
    if datatype == "BYTES":
        data = np.array([[b"a", b"bc", "é".encode(), b""]], dtype=object)
    else:
        data = np.arange(4).astype(datatypes.from_name(datatype).numpy).reshape(1, 4)

    (output,) = run(model, ["OUTPUT0"], INPUT0=data).values()

    assert output.shape == (1, 4)
    if datatype == "BYTES":  # ONNX Runtime is fed and returns str
        assert output.tolist() == [["a", "bc", "é", ""]]
    else:
        assert output.dtype == data.dtype
        assert np.array_equal(output, data)


def test_add_sub_runs_and_times_the_execution(tmp_path: Path) -> None:
    model = instance(add_sub_model(), tmp_path)
    a = np.arange(32, dtype=np.float32).reshape(2, 16)
    b = np.ones((2, 16), dtype=np.float32)
    timing = ExecutionTiming()

    outputs = model.run({"INPUT0": a, "INPUT1": b}, ["OUTPUT1", "OUTPUT0"], timing)

    assert list(outputs) == ["OUTPUT1", "OUTPUT0"]
    assert np.array_equal(outputs["OUTPUT0"], a + b)
    assert np.array_equal(outputs["OUTPUT1"], a - b)
    assert timing.compute_infer_ns > 0
    assert timing.compute_input_ns >= 0 and timing.compute_output_ns >= 0


def test_batch_only_output_is_reshaped_to_dims_one(tmp_path: Path) -> None:
    model = instance(multi_dtype_model(), tmp_path)
    b = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])

    outputs = run(model, ["B_SUM"], A=np.zeros((3, 3), dtype=np.int32), B=b)

    assert outputs["B_SUM"].shape == (3, 1)
    assert outputs["B_SUM"].tolist() == [[3.0], [7.0], [11.0]]


def test_input_reshape_maps_config_dims_to_the_graph_shape(tmp_path: Path) -> None:
    text = (
        "max_batch_size: 4\n"
        'input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ 2, 2 ], reshape: { shape: [ 4 ] } } ]\n'
    )
    model = instance(identity_model(ONNX_TYPES["FP32"]), tmp_path, text)
    data = np.arange(12, dtype=np.float32).reshape(3, 2, 2)

    outputs = run(model, ["OUTPUT0"], INPUT0=data)

    assert outputs["OUTPUT0"].shape == (3, 4)
    assert outputs["OUTPUT0"].ravel().tolist() == data.ravel().tolist()


def test_bytes_input_reaches_the_model_as_text(tmp_path: Path) -> None:
    model = instance(string_model(), tmp_path)
    text = np.array([[b"hello"], ["wörld".encode()]], dtype=object)

    outputs = run(model, ["TEXT_OUT"], TEXT=text)

    assert outputs["TEXT_OUT"].tolist() == [["hello"], ["wörld"]]  # not "b'hello'"


def test_bytes_input_must_be_utf8(tmp_path: Path) -> None:
    model = instance(string_model(), tmp_path)

    with pytest.raises(InvalidArgumentError, match="input 'TEXT': ONNX string tensors must be UTF-8"):
        run(model, ["TEXT_OUT"], TEXT=np.array([[b"\xff\xfe"]], dtype=object))


def test_input_the_model_rejects_is_invalid_argument(tmp_path: Path) -> None:
    model = instance(add_sub_model(), tmp_path)
    wrong_type = np.zeros((1, 16), dtype=np.float64)

    rejected = "model 'm' rejected the input: Unexpected input data type"
    with pytest.raises(InvalidArgumentError, match=rejected):
        run(model, ["OUTPUT0"], INPUT0=wrong_type, INPUT1=wrong_type)


def test_a_cpu_session_runs_without_its_python_wrapper(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = open_session(save(add_sub_model(), tmp_path), mc.ModelConfig())
    a, b = np.full((3, 16), 2, np.float32), np.ones((3, 16), np.float32)
    expected = session.run(["OUTPUT1", "OUTPUT0"], {"INPUT0": a, "INPUT1": b})

    def wrapper(*args: object) -> None:
        raise AssertionError("the wrapper ran")

    # Before the runner is made: a runner that kept the wrapper would keep this one.
    monkeypatch.setattr(session, "run", wrapper)
    runner = session_runner(session)
    ran = runner(["OUTPUT1", "OUTPUT0"], {"INPUT0": a, "INPUT1": b})
    every_output = runner([], {"INPUT0": a, "INPUT1": b})

    assert [r.tolist() for r in ran] == [e.tolist() for e in expected]
    assert len(every_output) == 2 and np.array_equal(every_output[0], a + b)


def test_a_feed_without_a_required_input_gets_the_wrappers_message(tmp_path: Path) -> None:
    runner = session_runner(open_session(save(add_sub_model(), tmp_path), mc.ModelConfig()))

    with pytest.raises(ValueError, match=r"Required inputs \(\['INPUT1'\]\) are missing"):
        runner(["OUTPUT0"], {"INPUT0": np.ones((1, 16), np.float32)})


def test_an_input_the_graph_does_not_have_is_invalid_argument(tmp_path: Path) -> None:
    model = instance(add_sub_model(), tmp_path)
    ones = np.ones((1, 16), np.float32)

    with pytest.raises(InvalidArgumentError, match="Invalid input name: EXTRA"):
        run(model, ["OUTPUT0"], INPUT0=ones, INPUT1=ones, EXTRA=ones)


def test_a_run_time_failure_names_the_model_and_version_and_no_source_file(tmp_path: Path) -> None:
    version = tmp_path / "m" / "3"
    version.mkdir(parents=True)
    model = instance(reshape_model(), version)

    with pytest.raises(InternalError) as caught:
        run(model, ["Y"], X=np.zeros(4, dtype=np.float32), SHAPE=np.array([3, 3]))

    assert caught.value.message == (
        "model 'm' version 3 failed while running: Non-zero status code returned while running Reshape "
        "node. Status Message: input_shape_size == requested_shape_size was false. The input tensor cannot "
        "be reshaped to the requested shape. Input shape:{4}, requested shape:{3,3}"
    )


def test_ort_message_keeps_what_it_says_and_drops_status_and_source_lines() -> None:
    text = (
        "[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Non-zero status code returned while running Gemm node. "
        "Name:'fc' Status Message: /onnxruntime_src/onnxruntime/core/providers/cpu/math/gemm_helper.h:14 "
        "onnxruntime::GemmHelper::GemmHelper(const TensorShape&, bool) const left.NumDimensions() == 2 was "
        "false. D:\\a\\_work\\1\\s\\onnxruntime\\core\\framework\\op_kernel.cc:83 see above\n"
    )

    assert ort_message(text) == (
        "Non-zero status code returned while running Gemm node. Name:'fc' Status Message: "
        "left.NumDimensions() == 2 was false. see above"
    )


def test_session_options_from_parameters() -> None:
    config = with_parameters(
        intra_op_thread_count="3",
        inter_op_thread_count="2",
        execution_mode="1",
        enable_mem_arena="0",
        enable_mem_pattern="0",
        allow_spinning="0",
    )
    config.optimization.graph.level = -1

    options = session_options(config)

    assert (options.intra_op_num_threads, options.inter_op_num_threads) == (3, 2)
    assert options.execution_mode == ort.ExecutionMode.ORT_PARALLEL
    assert not options.enable_cpu_mem_arena
    assert not options.enable_mem_pattern
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_BASIC


def test_session_option_defaults_share_the_cores_between_instances() -> None:
    config = parse_config("instance_group [ { count: 2 } ]")

    options = session_options(config)

    assert options.intra_op_num_threads == max(1, usable_cores() // 2)
    assert options.execution_mode == ort.ExecutionMode.ORT_SEQUENTIAL
    assert options.enable_cpu_mem_arena and options.enable_mem_pattern
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL


@pytest.mark.parametrize(("cores", "instances", "threads"), [(2, 1, 2), (16, 1, 16), (16, 3, 5), (2, 4, 1)])
def test_default_threads_share_the_cores_among_instances(
    monkeypatch: pytest.MonkeyPatch, cores: int, instances: int, threads: int
) -> None:
    # The cores this process may use (affinity and cgroup quota), not the machine's: conch.core.usable_cores.
    monkeypatch.setattr(onnxruntime_backend, "usable_cores", lambda: cores)

    assert default_intra_op_threads(instances) == threads


def test_worker_processes_share_the_cores() -> None:
    config = parse_config("instance_group [ { count: 1 } ]")

    assert session_options(config, cores=3).intra_op_num_threads == 3
    assert default_intra_op_threads(2, cores=1) == 1


@pytest.mark.parametrize("value", ["two", "1.5", ""])
def test_session_parameter_must_be_an_integer(value: str) -> None:
    with pytest.raises(
        InvalidArgumentError, match=f"parameters 'intra_op_thread_count' must be an integer, got '{value}'"
    ):
        session_options(with_parameters(intra_op_thread_count=value))


@pytest.mark.parametrize("content", [b"definitely not a protobuf", b""], ids=["garbage", "empty"])
def test_a_file_that_is_not_onnx_is_invalid_argument_without_its_path(tmp_path: Path, content: bytes) -> None:
    folder = tmp_path / "private-location"
    folder.mkdir()
    (folder / "model.onnx").write_bytes(content)

    with pytest.raises(InvalidArgumentError) as caught:
        open_session(folder / "model.onnx", mc.ModelConfig())

    assert caught.value.message.startswith("model.onnx is not a loadable ONNX model")
    assert str(tmp_path) not in caught.value.message
    assert "private-location" not in caught.value.message


def test_a_missing_file_is_invalid_argument_without_its_path(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match=r"net\.onnx is not a loadable ONNX model") as caught:
        open_session(tmp_path / "net.onnx", mc.ModelConfig())

    assert str(tmp_path) not in caught.value.message
