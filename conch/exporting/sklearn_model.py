"""scikit-learn estimators and pipelines to ONNX with skl2onnx, probabilities as a tensor.

A DataFrame sample gives one graph input per column, named by the column, which is how skl2onnx maps a
ColumnTransformer's column selections onto the graph; the graph's inputs are then renamed to the
columns' tensor names (``column_names``), since skl2onnx cleans awkward names by rules of its own.
Floating, boolean and nullable columns become FP32 (what servers and clients use), numpy integers
INT64, anything else BYTES. The original is then asked what it
computes on the sample exactly as the notebook gave it: ``predict`` for the first output and, for a
classifier that has it, ``predict_proba`` for the second.

ZipMap is off: with it, probabilities come out as a list of dictionaries, which no V2 client can read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from conch.exporting.agreement import Reference
from conch.exporting.column_names import rename_graph_inputs, renamed, tensor_names
from conch.exporting.conversion import Conversion, class_name, library_versions
from conch.exporting.errors import ExportError
from conch.exporting.frame_matrix import MATRIX_INPUT, check_numeric, join_columns, takes_matrix
from conch.exporting.missing_text import check_text_imputers, likely_causes, missing_text_as_empty
from conch.exporting.samples import SINGLE_INPUT, frame_columns, is_data_frame, mapping_frame
from conch.exporting.sklearn_parts import fitted_parts, patched_copy
from conch.exporting.text_graph import repair_text_graph
from conch.exporting.text_pipelines import (
    is_text_pipeline,
    stop_words_shown,
    text_sample,
    vectorizer_options,
)


def convert_estimator(model: Any, sample: Any) -> Conversion:
    """Convert a fitted estimator or pipeline; ``sample`` is what the notebook called ``fit`` with.

    That is a DataFrame, a mapping or a 2-D array, or for a text pipeline the text itself (a list, a
    Series or a one-column frame, see ``text_pipelines``).
    """
    import sklearn
    from sklearn.base import is_classifier

    try:
        from skl2onnx import to_onnx
        from skl2onnx.common.data_types import FloatTensorType
    except ImportError:
        raise ExportError(
            "exporting a scikit-learn model needs scikit-learn and skl2onnx: "
            "pip install -e '.[export]' in conch's source folder"
        ) from None

    if isinstance(sample, Mapping):
        sample = mapping_frame(sample)
    _check_no_dropped_columns(model)
    if is_text_pipeline(model):
        name, texts, sample = text_sample(sample)
        inputs, feature_names = {name: texts}, None
    else:
        inputs, feature_names = _inputs(model, sample)
    frame = is_data_frame(sample)
    as_matrix = frame and takes_matrix(model)
    if as_matrix:
        check_numeric(model, inputs)
        initial_types = [(MATRIX_INPUT, FloatTensorType([None, len(inputs)]))]
    else:
        initial_types = [(name, _tensor_type(array)) for name, array in inputs.items()]
    check_text_imputers(model)
    converted = patched_copy(model, [missing_text_as_empty, stop_words_shown])
    options, vectorizers = vectorizer_options(list(fitted_parts(converted)))
    if is_classifier(converted):
        options.setdefault(id(converted), {})["zipmap"] = False
    try:
        onnx_model = to_onnx(converted, initial_types=initial_types, options=options or None)
    except Exception as exc:  # skl2onnx raises whatever its converters raise: a message is all we have
        raise ExportError(f"skl2onnx cannot convert {type(model).__name__}: {exc}") from exc
    repair_text_graph(onnx_model, vectorizers)
    if as_matrix:
        join_columns(onnx_model, inputs)
    column_inputs: dict[str, str] = {}
    if frame:
        names = tensor_names(inputs)
        _name_graph_inputs(onnx_model, list(names.values()))
        inputs = {names[column]: values for column, values in inputs.items()}
        column_inputs = renamed(names)
    outputs = [output.name for output in onnx_model.graph.output]
    return Conversion(
        onnx_model=onnx_model,
        inputs=inputs,
        references=_references(model, sample, outputs),
        framework={"name": "scikit-learn", "version": sklearn.__version__, "model_class": class_name(model)},
        libraries=library_versions("scikit-learn", "skl2onnx"),
        feature_names=feature_names,
        column_inputs=column_inputs,
        classes=_classes(model, outputs),
        likely_causes=likely_causes(model, sample) if frame else None,
    )


def _check_no_dropped_columns(model: Any) -> None:
    """Refuse, by column, a SimpleImputer that dropped columns empty at fit time.

    skl2onnx converts such an imputer as if it kept every column, and the conversion then fails deep
    inside with a shape mismatch that names no column.
    """
    from sklearn.impute import SimpleImputer

    for part in fitted_parts(model):
        if not isinstance(part, SimpleImputer) or part.keep_empty_features:
            continue
        statistics = np.asarray(getattr(part, "statistics_", []))
        if statistics.dtype.kind != "f" or not np.isnan(statistics).any():
            continue
        names = getattr(part, "feature_names_in_", None)
        dropped = np.flatnonzero(np.isnan(statistics))
        columns = [str(names[i]) for i in dropped] if names is not None else [f"#{i}" for i in dropped]
        raise ExportError(
            f"column(s) {columns} held no values when the pipeline was fitted, so SimpleImputer dropped "
            "them, which skl2onnx cannot convert: drop the column(s) from the frame before fitting, or "
            "fit SimpleImputer(keep_empty_features=True)"
        )


def _classes(model: Any, outputs: list[str]) -> dict[str, list[Any]]:
    """A classifier's classes by its probability output: what each column of that output is."""
    classes = getattr(model, "classes_", None)
    if classes is None or len(outputs) < 2 or np.asarray(classes).ndim != 1:
        return {}
    return {outputs[1]: [_json_value(value) for value in np.asarray(classes).tolist()]}


def _json_value(value: Any) -> Any:
    return value if isinstance(value, str | int | float | bool) else str(value)


def _name_graph_inputs(onnx_model: Any, names: list[str]) -> None:
    # skl2onnx declares one graph input per initial type, in their order, under a name of its own.
    declared = [graph_input.name for graph_input in onnx_model.graph.input]
    if len(declared) != len(names):
        raise ExportError(
            f"skl2onnx made {len(declared)} graph inputs for {len(names)} columns; export the pipeline "
            "with a 2-D array sample instead"
        )
    rename_graph_inputs(onnx_model, dict(zip(declared, names, strict=True)))


def _inputs(model: Any, sample: Any) -> tuple[dict[str, np.ndarray], list[str] | None]:
    if is_data_frame(sample):
        columns = frame_columns(sample)
        return columns, list(columns)
    array = np.asarray(sample)
    if array.ndim != 2:
        raise ExportError(
            f"a scikit-learn sample must be a DataFrame or a 2-D array (rows, features); got shape "
            f"{list(array.shape)}"
        )
    names = getattr(model, "feature_names_in_", None)
    return {SINGLE_INPUT: array}, None if names is None else [str(n) for n in names]


def _tensor_type(array: np.ndarray) -> Any:
    from skl2onnx.common.data_types import FloatTensorType, Int64TensorType, StringTensorType

    shape = [None, array.shape[1]]
    if array.dtype.kind in "fb":
        return FloatTensorType(shape)
    if array.dtype.kind in "iu":
        return Int64TensorType(shape)
    return StringTensorType(shape)


def _references(model: Any, sample: Any, outputs: list[str]) -> dict[str, Reference]:
    from sklearn.base import is_classifier

    if not hasattr(model, "predict"):
        return {outputs[0]: _reference(model, "transform", sample)}
    references = {outputs[0]: _reference(model, "predict", sample)}
    if is_classifier(model) and hasattr(model, "predict_proba") and len(outputs) > 1:
        references[outputs[1]] = _reference(model, "predict_proba", sample)
    return references


def _reference(model: Any, method: str, sample: Any) -> Reference:
    try:
        values = getattr(model, method)(sample)
    except Exception as exc:  # the user's model: any failure is theirs to read, with its own message
        raise ExportError(f"{type(model).__name__}.{method} failed on the sample: {exc}") from exc
    return Reference(method, np.asarray(values))
