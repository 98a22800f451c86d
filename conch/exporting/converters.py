"""The converter a notebook object needs, chosen by its framework.

Each framework has its own module, imported only when a model of that framework arrives, so that
neither skl2onnx nor torch is needed to export the others. A model's framework is recognised without
importing anything: a torch module cannot exist unless torch was imported first.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import onnx

from conch.exporting.conversion import Conversion
from conch.exporting.errors import ExportError


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


def _is_instance(model: Any, module_name: str, class_attribute: str) -> bool:
    module = sys.modules.get(module_name)
    return module is not None and isinstance(model, getattr(module, class_attribute))
