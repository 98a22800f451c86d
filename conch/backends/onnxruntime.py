"""The ONNX Runtime backend: one ``InferenceSession`` per model instance.

Session options come from the config, with Triton's ONNX Runtime backend keys in ``parameters``:

- ``intra_op_thread_count``: threads inside one operator (default: cores / instance count, at least 1;
  one for a model whose runs are short, see ``conch.backends.onnxruntime_threads``)
- ``inter_op_thread_count``: threads across operators when ``execution_mode`` is 1
- ``execution_mode``: 0 sequential (default), 1 parallel
- ``enable_mem_arena``, ``enable_mem_pattern``: 0 or 1 (ONNX Runtime defaults: 1)
- ``allow_spinning``: 0 (conch's default) lets idle intra-op threads sleep, 1 lets them spin as ONNX
  Runtime does by default: spinning threads take the core the event loop needs

and ``optimization { graph { level: N } }``: -1 basic, 1 extended, anything else all (the default).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from onnxruntime.capi import onnxruntime_pybind11_state as ort_state
from tritonclient.grpc import model_config_pb2 as mc

from conch.backends.placement import CPU, Placement
from conch.backends.signature import ModelSignature, TensorSignature
from conch.core.errors import InternalError, InvalidArgumentError
from conch.core.types import ExecutionTiming
from conch.core.usable_cores import usable_cores

_ORT_TYPES = {
    "tensor(bool)": "BOOL",
    "tensor(uint8)": "UINT8",
    "tensor(uint16)": "UINT16",
    "tensor(uint32)": "UINT32",
    "tensor(uint64)": "UINT64",
    "tensor(int8)": "INT8",
    "tensor(int16)": "INT16",
    "tensor(int32)": "INT32",
    "tensor(int64)": "INT64",
    "tensor(float16)": "FP16",
    "tensor(float)": "FP32",
    "tensor(double)": "FP64",
    "tensor(string)": "BYTES",
}
_GRAPH_LEVELS = {
    -1: ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    1: ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
}
# An empty file or a protobuf without a graph is InvalidArgument; an unknown op can be NotImplemented.
_LOAD_ERRORS = (
    ort_state.Fail,
    ort_state.InvalidArgument,
    ort_state.InvalidGraph,
    ort_state.InvalidProtobuf,
    ort_state.NoSuchFile,
    ort_state.NotImplemented,
    ort_state.RuntimeException,
)
# ONNX Runtime's messages open with its status ("[ONNXRuntimeError] : 1 : FAIL : ") and quote the
# source line that failed, with the C++ function after it ("/onnxruntime_src/.../reshape_helper.h:91
# onnxruntime::ReshapeHelper::ReshapeHelper(...) "; Windows builds quote "D:\a\...\op_kernel.cc:83"):
# paths a client must not see (docs/protocol.md).
_ORT_STATUS = re.compile(r"\[ONNXRuntimeError\] : \d+ : \w+ : ")
_SOURCE_LINE = re.compile(
    r"(?:[A-Za-z]:)?(?:[\w.~-]*[/\\])*[\w.-]+\.(?:h|hpp|hh|c|cc|cpp|cxx|cu|cuh):\d+ "
    r"(?:[\w:~<>]+\([^()]*\)(?: const)? )?"
)
_NO_NODE_NAME = "Name:'' "
SESSION_PARAMETERS = (
    "intra_op_thread_count",
    "inter_op_thread_count",
    "execution_mode",
    "enable_mem_arena",
    "enable_mem_pattern",
    "allow_spinning",
)


def session_options(
    config: mc.ModelConfig, cores: int | None = None, threads: int | None = None
) -> ort.SessionOptions:
    """ONNX Runtime session options from the config's ``parameters`` and ``optimization``.

    ``cores``: how many cores this process's models may use (default: the machine's); worker
    processes each get their share, so that N workers do not start N times too many threads.
    ``threads``: the intra-op threads when the config does not set them (default: the cores shared
    among the instances; ``conch.backends.onnxruntime_threads`` picks one for short runs).
    """
    params = {
        key: config.parameters[key].string_value for key in SESSION_PARAMETERS if key in config.parameters
    }
    options = ort.SessionOptions()
    instances = sum(group.count for group in config.instance_group) or 1
    options.intra_op_num_threads = _int_param(
        params, "intra_op_thread_count", threads or default_intra_op_threads(instances, cores)
    )
    options.inter_op_num_threads = _int_param(params, "inter_op_thread_count", 0)
    if _int_param(params, "execution_mode", 0) == 1:
        options.execution_mode = ort.ExecutionMode.ORT_PARALLEL
    options.enable_cpu_mem_arena = bool(_int_param(params, "enable_mem_arena", 1))
    options.enable_mem_pattern = bool(_int_param(params, "enable_mem_pattern", 1))
    options.add_session_config_entry(
        "session.intra_op.allow_spinning", str(_int_param(params, "allow_spinning", 0))
    )
    level = config.optimization.graph.level
    options.graph_optimization_level = _GRAPH_LEVELS.get(level, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    options.log_severity_level = 3
    return options


def default_intra_op_threads(instances: int, cores: int | None = None) -> int:
    """Threads per instance: the cores (default: those this process may use) shared among the
    instances, at least one each.

    Measured on 2 cores with the benchmark MLP: one thread per instance left a core to the event loop
    (gRPC at 32 clients 1,160/s against 1,081/s with two) but doubled the latency of a lone request
    (4.4 ms against 2.1 ms) and lowered HTTP throughput (1,338/s against 1,409/s). Two threads that
    sleep when idle (``allow_spinning`` 0) give the loop its core back between executions.
    """
    return max(1, (cores or usable_cores()) // max(instances, 1))


def _int_param(params: dict[str, str], key: str, default: int) -> int:
    if key not in params:
        return default
    try:
        return int(params[key])
    except ValueError:
        raise InvalidArgumentError(f"parameters '{key}' must be an integer, got '{params[key]}'") from None


def open_session(
    model_file: Path,
    config: mc.ModelConfig,
    placement: Placement = CPU,
    cores: int | None = None,
    threads: int | None = None,
) -> ort.InferenceSession:
    """Load a model file on ``placement``; a file that is not ONNX becomes a 400 without its path.
    ``cores`` and ``threads`` as :func:`session_options` takes them.

    A GPU placement uses ONNX Runtime's CUDA provider when ``onnxruntime-gpu`` provides it; otherwise
    the session runs on the CPU (see :func:`gpu_available`).
    """
    providers: list[str | tuple[str, dict[str, str]]] = ["CPUExecutionProvider"]
    if placement.gpu and gpu_available():
        providers.insert(0, ("CUDAExecutionProvider", {"device_id": str(placement.device_id)}))
    try:
        return ort.InferenceSession(
            str(model_file), sess_options=session_options(config, cores, threads), providers=providers
        )
    except _LOAD_ERRORS as exc:
        reason = ort_message(str(exc).replace(str(model_file.parent) + os.sep, ""))
        raise InvalidArgumentError(f"{model_file.name} is not a loadable ONNX model: {reason}") from None


def ort_message(text: str) -> str:
    """ONNX Runtime's message ``text`` without its status prefix and without the source files and
    lines it quotes: what it says about the model and the tensors stays."""
    text = _ORT_STATUS.sub("", text)
    text = _SOURCE_LINE.sub("", text)
    return text.replace(_NO_NODE_NAME, "").strip()


def gpu_available() -> bool:
    """Whether this ONNX Runtime build has the CUDA provider (the ``onnxruntime-gpu`` package)."""
    return "CUDAExecutionProvider" in ort.get_available_providers()


def read_signature(session: ort.InferenceSession) -> ModelSignature:
    """The graph's inputs and outputs as V2 datatypes and shapes (None for dynamic dimensions)."""
    return ModelSignature(
        inputs=tuple(_tensor_signature(node) for node in session.get_inputs()),
        outputs=tuple(_tensor_signature(node) for node in session.get_outputs()),
    )


def _tensor_signature(node: ort.NodeArg) -> TensorSignature:
    datatype = _ORT_TYPES.get(node.type)
    if datatype is None:
        raise InvalidArgumentError(f"tensor '{node.name}' has type {node.type}, which conch cannot serve")
    shape = tuple(d if isinstance(d, int) and d >= 0 else None for d in (node.shape or []))
    return TensorSignature(node.name, datatype, shape)


def session_runner(session: ort.InferenceSession) -> Callable[[list[str], dict[str, np.ndarray]], list[Any]]:
    """What runs ``session``: its compiled run for a CPU-only session, else ``InferenceSession.run``.

    Why: ``InferenceSession.run`` is a Python wrapper that, before the compiled run, checks the feed
    for missing inputs (reading each input's name and type through the binding), checks for OrtValue
    inputs and for WebGPU graph capture. The server has checked every request against the model's
    inputs already, and those checks cost most when they run cold, as they do on an event loop that
    does a batch's gRPC and HTTP work between two runs: on ``tiny`` with Python work between runs a
    run cost 25 us of CPU this way against 31 us through the wrapper (``python -m
    bench.ort_run_cost``). A feed that lacks a required input still goes through the wrapper, for its
    message.

    A session with another execution provider keeps the wrapper: it falls back to the CPU provider
    when that provider fails. ``_sess`` is the wrapper's own handle on the compiled session
    (onnxruntime is pinned); a build without it runs through the wrapper.
    """
    compiled = getattr(session, "_sess", None)
    if compiled is None or session.get_providers() != ["CPUExecutionProvider"]:
        return session.run
    all_outputs = [output.name for output in session.get_outputs()]
    required = {i.name for i in session.get_inputs() if not i.type.startswith("optional")}

    def run(output_names: list[str], feed: dict[str, np.ndarray]) -> list[Any]:
        if not feed.keys() >= required:
            return session.run(output_names, feed)  # the wrapper's message names what is missing
        return compiled.run(output_names or all_outputs, feed, None)

    return run


class OnnxRuntimeInstance:
    """One model instance: a session plus the reshapes that map config dims to graph shapes."""

    def __init__(self, session: ort.InferenceSession, config: mc.ModelConfig) -> None:
        #: The session itself: its options say how it runs (the intra-op threads chosen at load).
        self.session = session
        self._run = session_runner(session)
        self._label = _model_label(session, config)
        self._batching = config.max_batch_size > 0
        self._input_reshape = {e.name: tuple(e.reshape.shape) for e in config.input if e.HasField("reshape")}
        self._output_dims = {e.name: tuple(e.dims) for e in config.output if e.HasField("reshape")}
        self._string_inputs = {e.name for e in config.input if e.data_type == mc.TYPE_STRING}
        # Most models neither reshape nor take strings: their inputs and outputs pass as they are,
        # without a method call per tensor of every execution.
        self._inputs_as_given = not self._input_reshape and not self._string_inputs
        self._outputs_as_given = not self._output_dims

    def run(
        self, inputs: dict[str, np.ndarray], output_names: list[str], timing: ExecutionTiming
    ) -> dict[str, np.ndarray]:
        """Run the graph on ``inputs`` (wire shapes); return ``output_names`` in wire shapes."""
        start = time.perf_counter_ns()
        if self._inputs_as_given:
            feed = inputs
        else:
            feed = {name: self._to_model(name, array) for name, array in inputs.items()}
        ran = time.perf_counter_ns()
        try:
            results = self._run(output_names, feed)
        except ort_state.InvalidArgument as exc:
            raise InvalidArgumentError(f"{self._label} rejected the input: {ort_message(str(exc))}") from None
        except (ort_state.Fail, ort_state.RuntimeException) as exc:
            raise InternalError(f"{self._label} failed while running: {ort_message(str(exc))}") from None
        done = time.perf_counter_ns()
        if self._outputs_as_given:
            outputs = dict(zip(output_names, results, strict=True))
        else:
            outputs = {
                name: self._to_wire(name, array) for name, array in zip(output_names, results, strict=True)
            }
        timing.compute_input_ns = ran - start
        timing.compute_infer_ns = done - ran
        timing.compute_output_ns = time.perf_counter_ns() - done
        return outputs

    def _to_model(self, name: str, array: np.ndarray) -> np.ndarray:
        if name in self._string_inputs:
            array = _decode_strings(name, array)
        reshape = self._input_reshape.get(name)
        if reshape is not None:
            array = array.reshape(array.shape[:1] + reshape if self._batching else reshape)
        return array

    def _to_wire(self, name: str, array: np.ndarray) -> np.ndarray:
        dims = self._output_dims.get(name)
        if dims is None:
            return array
        return array.reshape(array.shape[:1] + dims if self._batching else dims)


def _model_label(session: ort.InferenceSession, config: mc.ModelConfig) -> str:
    """``model 'name' version N`` for the messages of a run that failed.

    The config names the model; the version is the folder of the session's file,
    ``<model>/<version>/model.onnx`` in a repository. A session built from bytes (conch export's
    check) or a nameless config says less.
    """
    label = f"model '{config.name}'" if config.name else "the model"
    path = getattr(session, "_model_path", None)
    if path and Path(path).parent.name.isdigit():
        label += f" version {int(Path(path).parent.name)}"
    return label


def _decode_strings(name: str, array: np.ndarray) -> np.ndarray:
    # ONNX Runtime stringifies bytes objects ("b'...'"), so BYTES must reach it as str.
    try:
        decoded = [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in array.ravel().tolist()]
    except UnicodeDecodeError:
        raise InvalidArgumentError(f"input '{name}': ONNX string tensors must be UTF-8") from None
    out = np.empty(len(decoded), dtype=object)
    out[:] = decoded
    return out.reshape(array.shape)
