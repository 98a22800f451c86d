"""The benchmark models of ``shared/docs/BENCHMARKS.md``: plain FP32 ONNX MLPs with a dynamic batch.

- ``tiny``: 16 -> 64 -> 4, where server overhead dominates;
- ``mlp``: 512 -> 2048 -> 2048 -> 1000, where compute dominates and batching pays.

Weights are random with a fixed seed: the figures measure serving, not accuracy. Every server gets the
same ONNX file in the repository layout it reads (conch and Triton: ``<model>/config.pbtxt`` and
``<model>/1/``; MLServer: ``<model>/model-settings.json`` beside the file), with the same batching:
at most 64 requests, 500 microseconds of waiting for more.
"""

from __future__ import annotations

import itertools
import json
import shutil
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MODELS = {"tiny": (16, 64, 4), "mlp": (512, 2048, 2048, 1000)}
#: ``python -m bench.sweep``'s family, smallest first: from ``tiny``, where the server's overhead is all
#: there is, to ``huge``, where ONNX Runtime's compute is; input and output widths differ, so the JSON
#: and binary codecs see different sizes of tensor on the way in and out.
SWEEP_MODELS = {
    "tiny": (16, 64, 4),
    "s32": (32, 128, 10),
    "s64": (64, 256, 16),
    "s128": (128, 512, 32),
    "s256": (256, 512, 512, 64),
    "s384": (384, 1024, 1024, 128),
    "mlp": (512, 2048, 2048, 1000),
    "s768": (768, 3072, 3072, 1000),
    "huge": (1024, 4096, 4096, 1000),
}
MODELS |= {name: widths for name, widths in SWEEP_MODELS.items() if name not in MODELS}
#: ``bench.run``'s models when ``--models`` is not given.
DEFAULT_MODELS = ("tiny", "mlp")
MAX_BATCH_SIZE = 64
MAX_QUEUE_DELAY_US = 500
PEER_CODE = Path(__file__).parent / "peer_code"


def mlp_model(widths: tuple[int, ...], seed: int = 0) -> onnx.ModelProto:
    """Gemm + Relu layers of the given widths, input ``INPUT0`` [N, widths[0]], output ``OUTPUT0``."""
    rng = np.random.default_rng(seed)
    nodes, initializers = [], []
    current = "INPUT0"
    for index, (fan_in, fan_out) in enumerate(itertools.pairwise(widths)):
        weight = (rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in)).astype(np.float32)
        bias = np.zeros(fan_out, dtype=np.float32)
        initializers += [
            numpy_helper.from_array(weight, f"W{index}"),
            numpy_helper.from_array(bias, f"B{index}"),
        ]
        last = index == len(widths) - 2
        gemm_out = "OUTPUT0" if last else f"H{index}"
        nodes.append(helper.make_node("Gemm", [current, f"W{index}", f"B{index}"], [gemm_out]))
        if not last:
            nodes.append(helper.make_node("Relu", [gemm_out], [f"R{index}"]))
            current = f"R{index}"
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["batch", widths[0]])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["batch", widths[-1]])],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="conch-bench")
    model.ir_version = 8
    return model


def model_config(
    name: str,
    widths: tuple[int, ...],
    runtime: str = 'platform: "onnxruntime_onnx"',
    max_batch_size: int = MAX_BATCH_SIZE,
    delay_us: int = MAX_QUEUE_DELAY_US,
) -> str:
    """The ``config.pbtxt`` conch reads; Triton reads the same with ``runtime='backend: "python"'``."""
    return f"""name: "{name}"
{runtime}
max_batch_size: {max_batch_size}
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {widths[0]} ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {widths[-1]} ] }} ]
dynamic_batching {{ max_queue_delay_microseconds: {delay_us} }}
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
"""


def write_onnx(path: Path, name: str) -> Path:
    """The ``name`` model saved at ``path`` (parent folders created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(mlp_model(MODELS[name]), path)
    return path


def multiply_adds(name: str) -> int:
    """Multiply-adds of one row through the ``name`` MLP: the sweep's measure of model size."""
    return sum(a * b for a, b in itertools.pairwise(MODELS[name]))


def write_conch_repository(root: Path, names: Iterable[str] = DEFAULT_MODELS) -> Path:
    """``root/<model>/config.pbtxt`` and ``root/<model>/1/model.onnx`` for each named model."""
    for name in names:
        write_onnx(root / name / "1" / "model.onnx", name)
        (root / name / "config.pbtxt").write_text(model_config(name, MODELS[name]))
    return root


def write_triton_repository(root: Path, names: Iterable[str] = DEFAULT_MODELS) -> Path:
    """Python-backend models: ``1/model.py`` (``peer_code/triton_model.py``) runs ``1/model.onnx``."""
    for name in names:
        version = write_onnx(root / name / "1" / "model.onnx", name).parent
        shutil.copy(PEER_CODE / "triton_model.py", version / "model.py")
        (root / name / "config.pbtxt").write_text(model_config(name, MODELS[name], 'backend: "python"'))
    return root


def python_backend_models(name: str, onnx_callee: bool) -> list[str]:
    """The models :func:`write_python_backend_repository` writes for the ``name`` ONNX file, in the
    order they are measured: ``name``_python (ONNX Runtime in ``model.py``), with ``onnx_callee``
    ``name``_onnx (the ONNX file served natively), then the BLS models, ``name``_bls (calling
    ``name``_python) and with ``onnx_callee`` ``name``_bls_onnx (calling ``name``_onnx). BLS comes
    last, so what a BLS run leaves behind in a server cannot slow the plain models."""
    if onnx_callee:
        return [f"{name}_python", f"{name}_onnx", f"{name}_bls", f"{name}_bls_onnx"]
    return [f"{name}_python", f"{name}_bls"]


def write_python_backend_repository(root: Path, names: Iterable[str], onnx_callee: bool) -> Path:
    """Python-backend models that run as they are on Triton and on conch (see
    :func:`python_backend_models`): ``peer_code/triton_model.py`` beside its ONNX file, and
    ``peer_code/bls_model.py`` with the model it calls in the config's ``callee`` parameter. Only conch
    gets the ``onnx_callee`` pair: the Triton here has no ONNX Runtime backend."""
    python = 'backend: "python"'
    for name in names:
        widths = MODELS[name]
        version = write_onnx(root / f"{name}_python" / "1" / "model.onnx", name).parent
        shutil.copy(PEER_CODE / "triton_model.py", version / "model.py")
        (root / f"{name}_python" / "config.pbtxt").write_text(model_config(f"{name}_python", widths, python))
        callees = [("bls", f"{name}_python")]
        if onnx_callee:
            write_onnx(root / f"{name}_onnx" / "1" / "model.onnx", name)
            (root / f"{name}_onnx" / "config.pbtxt").write_text(model_config(f"{name}_onnx", widths))
            callees.append(("bls_onnx", f"{name}_onnx"))
        for suffix, callee in callees:
            bls = f"{name}_{suffix}"
            (root / bls / "1").mkdir(parents=True, exist_ok=True)
            shutil.copy(PEER_CODE / "bls_model.py", root / bls / "1" / "model.py")
            parameter = f'parameters {{ key: "callee" value: {{ string_value: "{callee}" }} }}\n'
            (root / bls / "config.pbtxt").write_text(model_config(bls, widths, python) + parameter)
    return root


def write_mlserver_repository(root: Path, names: Iterable[str] = DEFAULT_MODELS) -> Path:
    """``root/<model>/model-settings.json`` with adaptive batching, and the runtime module at ``root``.

    MLServer imports ``mlserver_runtime.OnnxMLP``: start it with ``root`` on ``PYTHONPATH``.
    """
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(PEER_CODE / "mlserver_runtime.py", root / "mlserver_runtime.py")
    for name in names:
        write_onnx(root / name / "model.onnx", name)
        settings = {
            "name": name,
            "implementation": "mlserver_runtime.OnnxMLP",
            "parameters": {"uri": "./model.onnx"},
            "max_batch_size": MAX_BATCH_SIZE,
            "max_batch_time": MAX_QUEUE_DELAY_US / 1_000_000,
        }
        (root / name / "model-settings.json").write_text(json.dumps(settings, indent=2))
    return root
