"""fp32 ONNX to int8 with ONNX Runtime's quantization tools: dynamic, or static on calibration rows.

- **Dynamic** (no calibration data): weights are stored as int8 and activations are quantized at
  run time from each batch's own range (``MatMulInteger``, ``ConvInteger``). Nothing to calibrate,
  and the right choice for MLPs and transformers, whose time goes to matrix products.
- **Static** (``--calibration``): activation ranges are measured once on real rows (min/max) and
  written into the graph as QuantizeLinear/DequantizeLinear pairs (the QDQ format), weights per
  channel. Convolutions need it: ONNX Runtime's ``ConvInteger`` kernel is slow on CPU (measured on
  the test CNN: 2.6 ms a batch dynamic against 0.43 ms static).

Both start from ONNX Runtime's recommended pre-processing (shape inference and graph optimization,
which folds BatchNorm into the convolution before its weights are quantized). A graph the
pre-processing cannot handle is quantized as it is.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np
import onnx
from onnxruntime.quantization import (
    CalibrationDataReader,
    QuantFormat,
    QuantType,
    quantize_dynamic,
    quantize_static,
)
from onnxruntime.quantization.shape_inference import quant_pre_process

from conch.optimizing.source import OptimizeError, is_model_file

log = logging.getLogger(__name__)

#: Operators only a quantized graph holds: dynamic (``DynamicQuantizeLinear`` and the integer
#: products) or static (the QDQ pairs).
INT8_OPERATORS = frozenset(
    {
        "QuantizeLinear",
        "DynamicQuantizeLinear",
        "MatMulInteger",
        "ConvInteger",
        "QLinearConv",
        "QLinearMatMul",
    }
)


class Method(enum.StrEnum):
    """How activations are quantized."""

    DYNAMIC = "dynamic"
    STATIC = "static"


class _Batches(CalibrationDataReader):  # type: ignore[misc]  # onnxruntime ships no type hints
    """The calibration rows, fed to the calibrator one batch at a time."""

    def __init__(self, feeds: Mapping[str, np.ndarray], batch_rows: int | None) -> None:
        self._batches = iter(_split(feeds, batch_rows))

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._batches, None)


def quantize(
    source: Path,
    target: Path,
    calibration: Mapping[str, np.ndarray] | None,
    batch_rows: int | None,
    work_dir: Path,
) -> Method:
    """Write the int8 form of ``source`` to ``target``; static when ``calibration`` rows are given.

    ``batch_rows`` is how many rows go to the calibrator at a time (None: all at once, for a model
    that does not batch); ``work_dir`` holds the pre-processed graph.
    """
    prepared = _pre_processed(source, work_dir / "pre-processed.onnx")
    external = _has_external_data(source)
    with _quiet_advice():
        if calibration is None:
            quantize_dynamic(prepared, target, weight_type=QuantType.QInt8, use_external_data_format=external)
            return Method.DYNAMIC
        quantize_static(
            prepared,
            target,
            _Batches(calibration, batch_rows),
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            use_external_data_format=external,
            # ONNX Runtime 1.32 fails adjusting weight scales to a Gemm's int32 bias when weights are
            # per channel (numpy compares an array as a truth value); skipping the adjustment works.
            extra_options={"QDQDisableWeightAdjustForInt32Bias": True},
        )
    return Method.STATIC


def check_quantized(model_file: Path) -> None:
    """Raise :class:`OptimizeError` when the quantizer found nothing to quantize in the graph.

    ONNX Runtime quietly copies a graph without matrix products or convolutions (a scikit-learn
    linear model's ``LinearClassifier``, tree ensembles): a twin that is fp32 under another name
    would only cost a version and a slot.
    """
    graph = onnx.load(str(model_file), load_external_data=False).graph
    operators = {node.op_type for node in graph.node}
    if operators & INT8_OPERATORS:
        return
    raise OptimizeError(
        f"ONNX Runtime found nothing to quantize: the graph's operators are {', '.join(sorted(operators))}, "
        "and int8 applies to matrix products and convolutions (MatMul, Gemm, Conv, attention, LSTM); "
        "nothing was written and the fp32 version stays as it is"
    )


def _split(feeds: Mapping[str, np.ndarray], batch_rows: int | None) -> Iterator[dict[str, np.ndarray]]:
    if batch_rows is None:
        yield dict(feeds)
        return
    rows = len(next(iter(feeds.values())))
    for start in range(0, rows, batch_rows):
        yield {name: array[start : start + batch_rows] for name, array in feeds.items()}


def _pre_processed(source: Path, target: Path) -> Path:
    # Where its symbolic shape inference stops short, ONNX Runtime saves the half-inferred graph as
    # sym_shape_infer_temp.onnx in the working folder: run it in a scratch folder, not the user's.
    source, target = source.resolve(), target.resolve()
    try:
        with (
            _quiet_advice(),
            tempfile.TemporaryDirectory(prefix="conch-quantize-") as scratch,
            contextlib.chdir(scratch),
        ):
            quant_pre_process(str(source), str(target), save_as_external_data=_has_external_data(source))
    except Exception as exc:  # shape inference raises whatever the graph's operators make it raise
        log.info("quantizing without ONNX Runtime's pre-processing, which failed: %s", exc)
        return source
    return target


def _has_external_data(model_file: Path) -> bool:
    """Whether the version folder holds more than the graph: weights saved as external data (> 2 GB)."""
    return any(is_model_file(path, model_file) for path in model_file.parent.iterdir())


@contextlib.contextmanager
def _quiet_advice() -> Iterator[None]:
    """ONNX Runtime's quantizer logs advice on the root logger (run pre-processing, which we did)."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(level)
