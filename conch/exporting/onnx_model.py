"""A model that is already ONNX (an ``onnx.ModelProto`` or a ``.onnx`` file): it is its own original.

There is nothing to compare it with, so export checks that it loads and runs on the sample, and that
the sample names every graph input.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from google.protobuf.message import DecodeError

from conch.exporting.conversion import Conversion, library_versions
from conch.exporting.errors import ExportError
from conch.exporting.samples import frame_columns, is_data_frame


def convert_onnx(model: onnx.ModelProto | str | os.PathLike[str], sample: Any) -> Conversion:
    """Load ``model`` if it is a path, and name the sample's arrays after the graph's inputs."""
    proto = model if isinstance(model, onnx.ModelProto) else _load(Path(model))
    inputs, feature_names = _inputs(proto, sample)
    producer = f"{proto.producer_name} {proto.producer_version}".strip()
    return Conversion(
        onnx_model=proto,
        inputs=inputs,
        references={},
        framework={"name": "onnx", "version": onnx.__version__, "producer": producer or "unknown"},
        libraries=library_versions(),
        feature_names=feature_names,
    )


def _load(path: Path) -> onnx.ModelProto:
    if not path.is_file():
        raise ExportError(f"'{path}' is not a file")
    try:
        return onnx.load(path)
    except (DecodeError, OSError, ValueError) as exc:
        raise ExportError(f"'{path}' is not an ONNX model: {exc}") from None


def _inputs(proto: onnx.ModelProto, sample: Any) -> tuple[dict[str, np.ndarray], list[str] | None]:
    if is_data_frame(sample):
        columns = frame_columns(sample)
        return columns, list(columns)
    if isinstance(sample, Mapping):
        return {str(name): np.asarray(values) for name, values in sample.items()}, None
    initializers = {tensor.name for tensor in proto.graph.initializer}
    names = [node.name for node in proto.graph.input if node.name not in initializers]
    if len(names) != 1:
        raise ExportError(
            f"the model has inputs {names}: give the sample as a mapping of input name to array"
        )
    return {names[0]: np.asarray(sample)}, None
