"""XGBoost, LightGBM and CatBoost models, alone or as the last step of a scikit-learn pipeline.

Each library's model becomes a converter registered with skl2onnx, so a bare model and a pipeline
(a ColumnTransformer, then the trees) take the same path as any scikit-learn estimator
(``sklearn_model``): the same inputs, the same check of ``predict`` and ``predict_proba``. XGBoost and
LightGBM convert with onnxmltools' converters. CatBoost converts with its own ONNX export
(``save_model(format="onnx")``), whose tree ensemble node is copied into skl2onnx's graph without its
ZipMap, so probabilities come out as a tensor as they do for every other classifier.

The libraries are recognised by module name, so none of them is imported unless the model is theirs,
and the converters are needed only then: ``pip install 'conch[boosting]'``.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import re
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib import metadata
from typing import Any

from conch.exporting.conversion import Conversion
from conch.exporting.errors import ExportError

#: The model libraries, by top-level module name, and the distributions that may have installed them.
LIBRARIES = {
    "xgboost": ("xgboost", "xgboost-cpu"),
    "lightgbm": ("lightgbm",),
    "catboost": ("catboost",),
}
INSTALL_HINT = "pip install 'conch[boosting]' (onnxmltools, skl2onnx, scikit-learn)"
#: skl2onnx knows ai.onnx.ml up to version 3 (TreeEnsemble's tensor attributes); onnxmltools' tree
#: converters add their nodes with no version, which would otherwise take onnx's newest (5).
_ML_DOMAIN, _ML_OPSET = "ai.onnx.ml", 3
_CLASSIFIER_OPTIONS = {"nocl": [True, False], "zipmap": [True, False, "columns"]}

_NO_CONVERTER = re.compile(
    r"Unable to find a (?:shape calculator|converter) for (?:type|alias|model) '(?:<class ')?([\w.]+)"
)

_registered: set[str] = set()


def boosting_libraries(model: Any) -> list[str]:
    """The boosted-trees libraries whose models ``model`` is or holds, by module name."""
    found = {_library(part) for part in _parts(model)}
    return sorted(name for name in found if name is not None)


def convert_boosted(model: Any, sample: Any) -> Conversion:
    """Convert a boosted-trees model or a pipeline ending in one, like any scikit-learn estimator."""
    libraries = boosting_libraries(model)
    for library in libraries:
        _register(library)
    from conch.exporting.sklearn_model import convert_estimator

    conversion = convert_estimator(model, sample)
    framework = conversion.framework
    own = _library(model)
    if own is not None:  # a bare model is the library's; a pipeline stays scikit-learn's
        framework = {**framework, "name": own, "version": _installed_version(own)}
    versions = dict(conversion.libraries)
    for library in libraries:
        versions[_distribution(library)] = _installed_version(library)
    if "xgboost" in libraries or "lightgbm" in libraries:
        versions["onnxmltools"] = metadata.version("onnxmltools")
    return dataclasses.replace(conversion, framework=framework, libraries=dict(sorted(versions.items())))


@contextmanager
def naming_missing_converter() -> Iterator[None]:
    """Turn skl2onnx's "Unable to find a shape calculator" (no converter for a part) into what to do."""
    try:
        yield
    except ExportError as exc:
        found = _NO_CONVERTER.search(str(exc))
        if found is None:
            raise
        raise ExportError(
            f"skl2onnx has no converter for {found[1]}: conch exports scikit-learn's own estimators, and "
            f"XGBoost, LightGBM and CatBoost models with {INSTALL_HINT}; for a model of another library, "
            "convert it to ONNX with that library's exporter and export the .onnx file"
        ) from exc


def _parts(model: Any) -> Iterator[Any]:
    yield model
    get_params = getattr(model, "get_params", None)
    if get_params is None or _library(model) is not None:
        return
    try:
        params = get_params(deep=True)
    except Exception:  # a third-party object's get_params: nothing to walk then
        return
    for value in params.values():
        if hasattr(value, "fit"):
            yield value


def _library(part: Any) -> str | None:
    root = type(part).__module__.partition(".")[0]
    return root if root in LIBRARIES else None


def _distribution(library: str) -> str:
    for name in LIBRARIES[library]:
        try:
            metadata.version(name)
            return name
        except metadata.PackageNotFoundError:
            continue
    return library


def _installed_version(library: str) -> str:
    try:
        return metadata.version(_distribution(library))
    except metadata.PackageNotFoundError:
        return "unknown"


def _register(library: str) -> None:
    if library in _registered:
        return
    try:
        from skl2onnx import update_registered_converter
        from skl2onnx.common.shape_calculator import (
            calculate_linear_classifier_output_shapes,
            calculate_linear_regressor_output_shapes,
        )
    except ImportError as exc:
        raise ExportError(
            f"exporting a {library} model needs its converters ({exc}): {INSTALL_HINT}"
        ) from None
    classifier, regressor, convert = _library_parts(library)
    alias = f"Conch{library}{classifier.__name__}"
    update_registered_converter(
        classifier,
        alias,
        calculate_linear_classifier_output_shapes,
        _within_ml_opset(convert),
        # skl2onnx's own parser sees a classifier by scikit-learn's mixin, which CatBoost's lacks.
        parser=_classifier_parser(alias) if library == "catboost" else None,
        options=_CLASSIFIER_OPTIONS,
    )
    update_registered_converter(
        regressor,
        f"Conch{library}{regressor.__name__}",
        calculate_linear_regressor_output_shapes,
        _within_ml_opset(convert),
    )
    _registered.add(library)


def _library_parts(library: str) -> tuple[type, type, Callable[..., None]]:
    if library == "catboost":
        from catboost import CatBoostClassifier, CatBoostRegressor

        return CatBoostClassifier, CatBoostRegressor, _convert_catboost
    try:
        if library == "xgboost":
            from onnxmltools.convert.xgboost.operator_converters.XGBoost import convert_xgboost
            from xgboost import XGBClassifier, XGBRegressor

            return XGBClassifier, XGBRegressor, convert_xgboost
        from lightgbm import LGBMClassifier, LGBMRegressor
        from onnxmltools.convert.lightgbm.operator_converters.LightGbm import convert_lightgbm

        return LGBMClassifier, LGBMRegressor, convert_lightgbm
    except ImportError as exc:
        raise ExportError(f"exporting a {library} model needs onnxmltools ({exc}): {INSTALL_HINT}") from None


def _classifier_parser(alias: str) -> Callable[..., Any]:
    def parse(scope: Any, model: Any, inputs: Any, custom_parsers: Any = None) -> Any:
        from skl2onnx.common.data_types import FloatTensorType, Int64TensorType

        operator = scope.declare_local_operator(alias, model)
        operator.inputs = inputs
        operator.outputs.append(scope.declare_local_variable("label", Int64TensorType()))
        operator.outputs.append(scope.declare_local_variable("probabilities", FloatTensorType()))
        return operator.outputs

    return parse


def _within_ml_opset(convert: Callable[..., None]) -> Callable[..., None]:
    def converter(scope: Any, operator: Any, container: Any) -> None:
        if isinstance(container.target_opset_all, dict):
            container.target_opset_all.setdefault(_ML_DOMAIN, _ML_OPSET)
        operator.raw_operator = _features_by_position(operator.raw_operator)
        convert(scope, operator, container)

    return converter


def _features_by_position(model: Any) -> Any:
    """An XGBoost model fitted on a DataFrame names its features by column; onnxmltools reads them by
    position (``f0``, ``f1``...), which is how the graph receives them. A copy is renamed, never the
    notebook's model."""
    booster = getattr(model, "get_booster", None)
    if _library(model) != "xgboost" or booster is None or booster().feature_names is None:
        return model
    positional = copy.deepcopy(model)
    positional.get_booster().feature_names = None
    return positional


def _convert_catboost(scope: Any, operator: Any, container: Any) -> None:
    """CatBoost's own ONNX export, its one tree ensemble node copied in; its ZipMap is left out."""
    from onnx.helper import get_attribute_value

    graph = _catboost_onnx(operator.raw_operator)
    kept = [node for node in graph.graph.node if node.op_type != "ZipMap"]
    if (
        len(kept) != 1
        or kept[0].op_type not in ("TreeEnsembleClassifier", "TreeEnsembleRegressor")
        or graph.graph.initializer
    ):
        raise ExportError(
            "CatBoost's ONNX export of this model is not one tree ensemble (found "
            f"{[node.op_type for node in graph.graph.node]}); conch exports CatBoost models of numeric "
            "features: encode categorical features in the pipeline (e.g. OneHotEncoder) instead of "
            "passing cat_features"
        )
    node = kept[0]
    opsets = {entry.domain: entry.version for entry in graph.opset_import}
    outputs = (
        operator.output_full_names
        if node.op_type == "TreeEnsembleClassifier"
        else [operator.outputs[0].full_name]
    )
    container.add_node(
        node.op_type,
        operator.input_full_names,
        outputs,
        op_domain=node.domain,
        op_version=opsets.get(node.domain),
        name=scope.get_unique_operator_name(node.op_type),
        **{attribute.name: get_attribute_value(attribute) for attribute in node.attribute},
    )


def _catboost_onnx(model: Any) -> Any:
    import onnx

    with tempfile.TemporaryDirectory(prefix="conch-catboost-") as folder:
        path = os.path.join(folder, "model.onnx")
        try:
            model.save_model(path, format="onnx")
        except Exception as exc:  # CatBoost's own refusal (categorical or text features) says why
            raise ExportError(f"CatBoost cannot export this model to ONNX: {exc}") from exc
        return onnx.load(path)
