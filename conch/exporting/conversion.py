"""From a notebook object to an ONNX graph plus what the original computed on the sample.

Each framework has its own module, imported only when a model of that framework arrives, so that
neither skl2onnx nor torch is needed to export the others. A model's framework is recognised without
importing anything: a torch module cannot exist unless torch was imported first.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

import numpy as np
import onnx

from conch.exporting.agreement import Reference
from conch.exporting.errors import ExportError

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


def convert(model: Any, sample: Any) -> Conversion:
    """Convert ``model`` with the path its framework needs."""
    if isinstance(model, onnx.ModelProto | str | os.PathLike):
        from conch.exporting.onnx_model import convert_onnx

        return convert_onnx(model, sample)
    from conch.exporting.boosted_trees import boosting_libraries, convert_boosted, naming_missing_converter

    if boosting_libraries(model):
        return convert_boosted(model, sample)
    if _is_instance(model, "sklearn.base", "BaseEstimator"):
        from conch.exporting.sklearn_model import convert_estimator

        with naming_missing_converter():
            return convert_estimator(model, sample)
    if _is_instance(model, "torch.nn", "Module"):
        from conch.exporting.torch_module import convert_module

        return convert_module(model, sample)
    raise ExportError(
        "export takes a scikit-learn estimator or pipeline, an XGBoost, LightGBM or CatBoost model, a "
        "torch nn.Module, an onnx.ModelProto or "
        f"the path of a .onnx file; got {type(model).__module__}.{type(model).__qualname__}"
    )


def library_versions(*distributions: str) -> dict[str, str]:
    """Installed versions of ``distributions`` and of :data:`BASE_LIBRARIES`, by distribution name."""
    return {name: metadata.version(name) for name in sorted({*BASE_LIBRARIES, *distributions})}


def class_name(model: Any) -> str:
    return f"{type(model).__module__}.{type(model).__qualname__}"


def _is_instance(model: Any, module_name: str, class_attribute: str) -> bool:
    module = sys.modules.get(module_name)
    return module is not None and isinstance(model, getattr(module, class_attribute))
