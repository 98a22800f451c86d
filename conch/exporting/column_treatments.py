"""How a fitted scikit-learn model treats each column it was given: missing values and categories.

A data contract must refuse only what the pipeline itself would refuse, so its rules are read off the
fitted parts rather than guessed from the data:

- a column **imputes** when an imputer (``sklearn.impute``) or a text vectorizer (which reads an
  empty text, the missing text, as no words) sits on its path, or when every part on
  its path lets NaN through (scikit-learn's ``allow_nan`` tag) to an estimator that takes NaN
  (HistGradientBoosting, XGBoost, LightGBM, CatBoost); a dropped column imputes trivially;
- a column's **categories** are its encoder's ``categories_`` (OneHotEncoder, OrdinalEncoder), missing
  values left out, and an unknown one is **refused** only where the encoder's ``handle_unknown`` is
  ``error``.

The walk follows column identity through parts that keep it (imputers, scalers, an OrdinalEncoder) and
stops at the first part that mixes columns, as nothing after it is one column's any more.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from conch.exporting.samples import is_missing

#: Scalers from ``sklearn.preprocessing`` that map each column on its own: the column stays itself.
_COLUMN_WISE = frozenset(
    {"StandardScaler", "MinMaxScaler", "MaxAbsScaler", "RobustScaler", "PowerTransformer"}
)
#: Boosted-tree libraries whose estimators take NaN as missing.
_NAN_LIBRARIES = ("xgboost", "lightgbm", "catboost")


@dataclass
class ColumnTreatment:
    """What the pipeline does with one column: whether it treats missing values, and its categories."""

    imputes: bool = False
    categories: list[Any] | None = None
    refuses_unknown: bool = False
    #: A part on its path does not take NaN (so only an imputer before it treats missing values).
    refuses_nan: bool = False
    dropped: bool = False


def column_treatments(model: Any, columns: list[Any]) -> dict[Any, ColumnTreatment]:
    """Each of ``columns`` (the frame's column names, or positions for an array) by how ``model``
    treats it."""
    treatments = {column: ColumnTreatment() for column in columns}
    _walk(model, list(columns), treatments)
    takes_nan = _takes_nan(_final_estimator(model))
    for treatment in treatments.values():
        if treatment.dropped or (takes_nan and not treatment.refuses_nan and treatment.categories is None):
            treatment.imputes = True
    return treatments


def _walk(part: Any, columns: list[Any], treatments: dict[Any, ColumnTreatment]) -> bool:
    """Record what ``part`` does to ``columns``; True when they leave it still one column each."""
    from sklearn.compose import ColumnTransformer
    from sklearn.pipeline import Pipeline

    if isinstance(part, Pipeline):
        for _, step in part.steps:
            if step is None or step == "passthrough":
                continue
            if not _walk(step, columns, treatments):
                return False
        return True
    if isinstance(part, ColumnTransformer):
        for _, transformer, selection in part.transformers_:
            chosen = _selected(part, selection, columns)
            if transformer == "drop":
                for column in chosen:
                    treatments[column].dropped = True
            elif transformer != "passthrough":
                _walk(transformer, chosen, treatments)
        return False
    return _one_part(part, columns, treatments)


def _one_part(part: Any, columns: list[Any], treatments: dict[Any, ColumnTreatment]) -> bool:
    module = type(part).__module__
    name = type(part).__name__
    if module.startswith("sklearn.impute"):
        for column in columns:
            treatments[column].imputes = True
        return True
    if module.startswith("sklearn.feature_extraction.text"):  # an empty text is no words: treated
        for column in columns:
            treatments[column].imputes = True
        return False
    if name == "FunctionTransformer" and part.func is None:  # how a fitted "passthrough" is kept
        return True
    if name in ("OneHotEncoder", "OrdinalEncoder") and hasattr(part, "categories_"):
        _record_categories(part, columns, treatments)
        return name == "OrdinalEncoder"
    if not _allows_nan(part):
        for column in columns:
            treatments[column].refuses_nan = True
    return module.startswith("sklearn.preprocessing") and name in _COLUMN_WISE


def _record_categories(encoder: Any, columns: list[Any], treatments: dict[Any, ColumnTreatment]) -> None:
    refuses = getattr(encoder, "handle_unknown", "error") == "error"
    for column, known in zip(columns, encoder.categories_, strict=False):
        treatment = treatments[column]
        values = [
            _plain(value) for value in np.asarray(known, dtype=object).tolist() if not is_missing(value)
        ]
        if len(values) < len(known) or "" in values:  # missing learned as a category: passed as missing
            treatment.imputes = True
        treatment.categories = [value for value in values if value != ""]
        treatment.refuses_unknown = refuses


def _selected(transformer: Any, selection: Any, columns: list[Any]) -> list[Any]:
    """The columns a ColumnTransformer entry picks: by name, position, mask or slice."""
    if callable(selection):
        selection = selection(transformer)
    if isinstance(selection, slice):
        return columns[selection]
    picked: Any = np.atleast_1d(np.asarray(selection, dtype=object)) if selection is not None else []
    if len(picked) and isinstance(picked[0], bool | np.bool_):
        return [column for column, keep in zip(columns, picked, strict=False) if keep]
    chosen = []
    for each in picked:
        if each in columns:
            chosen.append(each)
        elif isinstance(each, int | np.integer) and 0 <= int(each) < len(columns):
            chosen.append(columns[int(each)])
    return chosen


def _final_estimator(model: Any) -> Any:
    while hasattr(model, "steps"):
        model = model.steps[-1][1]
    return model


def _takes_nan(estimator: Any) -> bool:
    if type(estimator).__module__.split(".")[0] in _NAN_LIBRARIES:
        return True
    return _allows_nan(estimator)


def _allows_nan(part: Any) -> bool:
    try:
        from sklearn.utils import get_tags

        return bool(get_tags(part).input_tags.allow_nan)
    except Exception:  # a part from elsewhere without tags: assume it does not take NaN
        return False


def _plain(value: Any) -> Any:
    """A category as YAML writes it: numpy scalars as Python's, anything else as text."""
    if isinstance(value, np.generic):
        value = value.item()
    return value if isinstance(value, str | int | float | bool) else str(value)
