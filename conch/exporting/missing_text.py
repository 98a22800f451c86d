"""Missing text values (None, NaN, pandas' NA) as the notebook's pipeline treats them.

pandas 3 reads every missing string as NaN, and the usual pipeline for a text column is
``SimpleImputer(strategy="most_frequent") -> OneHotEncoder``. An ONNX string tensor cannot hold NaN,
so a missing text value travels as the empty string (``conch.exporting.samples``). The exported graph
must then treat the empty string as the pipeline treats NaN:

- a ``SimpleImputer`` fitted on text with NaN as its missing value is converted as one whose missing
  value is ``""`` (skl2onnx refuses a NaN missing value on strings);
- a ``OneHotEncoder`` that learned NaN as a category is converted with ``""`` in its place;
- a text imputer's missing-value indicator (``add_indicator=True``) has no ONNX form: it is refused.

Both changes are patches made on a copy (``sklearn_parts.patched_copy``), so the notebook's model is
never touched, and the check against the original on the sample shows that they answer alike. A text
value that really is ``""`` is then missing too: the one case where the two differ.

:func:`likely_causes` explains a disagreement by the rows involved: a missing text value or a category
the pipeline never saw, which is what usually lies behind one on a frame.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from conch.exporting.errors import ExportError
from conch.exporting.samples import is_missing
from conch.exporting.sklearn_parts import fitted_parts


def missing_text_as_empty(part: Any, apply: bool) -> bool:
    """A patch (``sklearn_parts.Patch``): imputers and encoders take ``""`` for a missing text value."""
    if _imputes_text(part):
        if apply:
            part.missing_values = ""
        return True
    indices = _missing_category(part)
    for index in indices if apply else []:
        categories = part.categories_[index].copy()
        categories[[is_missing(value) for value in categories]] = ""
        part.categories_[index] = categories
    return bool(indices)


def check_text_imputers(model: Any) -> None:
    """Refuse, by column, a text imputer whose missing-value indicator skl2onnx cannot convert.

    skl2onnx writes ``SimpleImputer(add_indicator=True)`` on text as a graph that fails on its first
    row, with an error that names no column.
    """
    for part in fitted_parts(model):
        if _imputes_text(part) and part.add_indicator:
            columns = [str(c) for c in getattr(part, "feature_names_in_", [])]
            raise ExportError(
                f"text column(s) {columns} are imputed with add_indicator=True, which has no ONNX form for "
                "text: fit SimpleImputer(add_indicator=False) and add the indicator as a column of its own "
                "before fitting, e.g. frame[col + '_missing'] = frame[col].isna()"
            )


def missing_text_rows(frame: Any) -> dict[str, list[int]]:
    """Each text column of ``frame`` with missing values, and the positions of those rows."""
    from pandas.api import types

    found = {}
    for position, name in enumerate(frame.columns):
        series = frame.iloc[:, position]
        if types.is_numeric_dtype(series.dtype) or types.is_bool_dtype(series.dtype):
            continue
        rows = np.flatnonzero(series.isna().to_numpy()).tolist()
        if rows:
            found[str(name)] = rows
    return found


def likely_causes(model: Any, frame: Any) -> Callable[[list[int]], list[str]]:
    """What may explain a disagreement on the given rows of ``frame``, most likely first."""
    missing = missing_text_rows(frame)
    known = _known_categories(model)

    def explain(rows: list[int]) -> list[str]:
        causes = []
        for column, missing_rows in missing.items():
            involved = sorted(set(rows) & set(missing_rows))
            if involved:
                partly = "" if len(involved) == len(rows) else " (not in the other rows: not all of it)"
                causes.append(
                    f"column '{column}' holds a missing text value in row(s) {involved[:10]}{partly}: the "
                    f"served model receives it as the empty string; fill it before fitting, e.g. "
                    f"frame['{column}'].fillna('missing'), or impute it with SimpleImputer in the pipeline"
                )
        for column in missing.keys() | {c for c, values in known.items() if any(map(is_missing, values))}:
            empty = [row for row in rows if column in frame.columns and frame[column].iloc[row] == ""]
            if empty:
                causes.append(
                    f"column '{column}' holds the empty string in row(s) {empty[:10]}, which the served "
                    "model cannot tell from a missing text value: give it a name before fitting, e.g. "
                    f"frame['{column}'].replace('', 'blank')"
                )
        for column, categories in known.items():
            if column not in frame.columns:
                continue
            values = frame[column].iloc[rows]
            unseen = [v for v in values if not is_missing(v) and v not in categories]
            if unseen:
                causes.append(
                    f"column '{column}' holds categories never seen in fitting, such as {unseen[0]!r}: "
                    "fit the encoder with handle_unknown='ignore', or on data that holds them"
                )
        return causes

    return explain


def _imputes_text(part: Any) -> bool:
    from sklearn.impute import SimpleImputer

    if not isinstance(part, SimpleImputer):
        return False
    statistics = np.asarray(getattr(part, "statistics_", []))
    return statistics.dtype.kind == "O" and is_missing(part.missing_values)


def _missing_category(part: Any) -> list[int]:
    from sklearn.preprocessing import OneHotEncoder

    if not isinstance(part, OneHotEncoder):
        return []
    return [
        index
        for index, categories in enumerate(getattr(part, "categories_", []))
        if categories.dtype.kind == "O" and any(is_missing(value) for value in categories)
    ]


def _imputer_columns(part: Any) -> list[Any]:
    return list(getattr(part, "feature_names_in_", [])) if _imputes_text(part) else []


def _known_categories(model: Any) -> dict[str, set[Any]]:
    from sklearn.preprocessing import OneHotEncoder, OrdinalEncoder

    known: dict[str, set[Any]] = {}
    for part in fitted_parts(model):
        for _, transformer, columns in getattr(part, "transformers_", None) or []:
            encoder = next(
                (p for p in fitted_parts(transformer) if isinstance(p, OneHotEncoder | OrdinalEncoder)), None
            )
            if encoder is None or isinstance(columns, str) or not hasattr(encoder, "categories_"):
                continue
            names = [str(c) for c in np.atleast_1d(columns)]
            for name, categories in zip(names, encoder.categories_, strict=False):
                known[name] = set(categories.tolist())
    return known
