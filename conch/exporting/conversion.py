"""What converting a notebook object gives: an ONNX graph plus what the original computed on the
sample (:class:`Conversion`), and the facts every converter records with it. Choosing the converter
is :mod:`conch.exporting.converters`'s."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

import numpy as np
import onnx

from conch.exporting.agreement import Reference

#: Recorded for every export, whatever the framework: what produced and checked the graph.
BASE_LIBRARIES = ("conch", "numpy", "onnx", "onnxruntime")


@dataclass(frozen=True)
class Conversion:
    """An ONNX graph, the sample by graph input name, and the original's outputs by graph output name.

    ``references`` is empty for a model that arrived as ONNX: it is its own original.
    ``column_inputs`` maps each DataFrame column that was renamed to its tensor name.
    ``classes`` names, for each output that has one value per class, the classes in column order.
    ``likely_causes`` explains a disagreement on some of the sample's rows, most likely cause first.
    """

    onnx_model: onnx.ModelProto
    inputs: dict[str, np.ndarray]
    references: dict[str, Reference]
    framework: dict[str, str]
    libraries: dict[str, str]
    feature_names: list[str] | None
    column_inputs: dict[str, str] = field(default_factory=dict)
    classes: dict[str, list[Any]] = field(default_factory=dict)
    likely_causes: Callable[[list[int]], list[str]] | None = None


def library_versions(*distributions: str) -> dict[str, str]:
    """Installed versions of ``distributions`` and of :data:`BASE_LIBRARIES`, by distribution name."""
    return {name: metadata.version(name) for name in sorted({*BASE_LIBRARIES, *distributions})}


def class_name(model: Any) -> str:
    return f"{type(model).__module__}.{type(model).__qualname__}"
