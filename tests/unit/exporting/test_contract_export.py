"""How export reads a contract off a fitted pipeline: which columns impute, their categories, and
whether an unknown category is refused (no ONNX conversion: the walk of the fitted parts only)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from sklearn.compose import ColumnTransformer, make_column_transformer
from sklearn.ensemble import HistGradientBoostingRegressor
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.impute import SimpleImputer
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder, OrdinalEncoder, StandardScaler

from conch.core.contracts import CONTRACT_FILENAME, parse_contract
from conch.exporting import export
from conch.exporting.column_treatments import column_treatments
from conch.exporting.data_contract import _default


def frame(rows: int = 40) -> tuple[pd.DataFrame, np.ndarray]:
    rng = np.random.default_rng(1)
    data = pd.DataFrame(
        {
            "x": rng.normal(size=rows),
            "y": rng.normal(size=rows),
            "colour": rng.choice(["red", "blue"], rows),
            "size": rng.choice(["S", "M", "L"], rows),
        }
    )
    return data, rng.normal(size=rows)


def test_imputers_encoders_and_dropped_columns_decide_each_columns_treatment() -> None:
    data, target = frame()
    features = ColumnTransformer(
        [
            ("x", make_pipeline(SimpleImputer(), StandardScaler()), ["x"]),
            ("colour", OneHotEncoder(handle_unknown="ignore"), ["colour"]),
            ("size", make_pipeline(SimpleImputer(strategy="most_frequent"), OrdinalEncoder()), [3]),
        ],
        remainder="drop",
    )
    model = make_pipeline(features, LinearRegression()).fit(data, target)
    found = column_treatments(model, list(data.columns))
    assert found["x"].imputes and found["x"].categories is None
    assert not found["colour"].imputes and found["colour"].categories == ["blue", "red"]
    assert not found["colour"].refuses_unknown
    assert (
        found["size"].imputes
        and found["size"].categories == ["L", "M", "S"]
        and found["size"].refuses_unknown
    )
    assert found["y"].dropped and found["y"].imputes  # a dropped column takes anything


def test_a_text_vectorizer_treats_an_empty_text_as_missing() -> None:
    data, target = frame()
    data["note"] = np.where(np.arange(len(data)) % 2, "fast delivery", "")
    features = make_column_transformer((TfidfVectorizer(), "note"), (StandardScaler(), ["x"]))
    found = column_treatments(make_pipeline(features, LinearRegression()).fit(data, target), ["note", "x"])
    assert found["note"].imputes and found["note"].categories is None and not found["x"].imputes


def test_an_estimator_that_takes_nan_imputes_every_numeric_column_that_reaches_it() -> None:
    data, target = frame()
    numbers = data[["x", "y"]]
    assert all(
        t.imputes
        for t in column_treatments(
            HistGradientBoostingRegressor(max_iter=5).fit(numbers, target), ["x", "y"]
        ).values()
    )
    scaled = make_pipeline(StandardScaler(), HistGradientBoostingRegressor(max_iter=5)).fit(numbers, target)
    assert all(t.imputes for t in column_treatments(scaled, ["x", "y"]).values())
    assert not any(
        t.imputes for t in column_treatments(LinearRegression().fit(numbers, target), ["x", "y"]).values()
    )
    encoded = make_pipeline(
        make_column_transformer((OneHotEncoder(), ["colour"]), remainder="passthrough"),
        HistGradientBoostingRegressor(max_iter=5),
    ).fit(data[["x", "colour"]], target)
    found = column_treatments(encoded, ["x", "colour"])
    assert found["x"].imputes and not found["colour"].imputes and found["colour"].refuses_unknown


@pytest.mark.parametrize(
    ("values", "kind", "default"),
    [
        (np.array([[1.0], [np.nan], [3.0], [10.0]]), "number", 3.0),
        (np.array([[2], [2], [5]]), "integer", 2),
        (np.array([[b"a"], [b""], [b"b"], [b"b"]], dtype=object), "string", "b"),
        (np.array([[np.nan], [np.nan]]), "number", None),
    ],
)
def test_a_default_is_the_median_or_the_most_frequent_value_seen(
    values: np.ndarray, kind: str, default: object
) -> None:
    assert _default(values, kind) == default


def test_an_array_model_gets_one_field_that_imputes_only_where_every_column_does(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    matrix = rng.normal(size=(60, 3))
    target = (matrix[:, 0] > 0).astype(int)
    imputing = make_pipeline(SimpleImputer(), LogisticRegression()).fit(matrix, target)
    plain = LogisticRegression().fit(matrix, target)
    for name, model, missing in [("imputing", imputing, "impute"), ("plain", plain, "refuse")]:
        version = export(model, matrix[:10], repository=tmp_path, name=name)
        (field,) = yaml.safe_load((version / CONTRACT_FILENAME).read_text())["fields"]
        assert (field["name"], field["conch"]["missing"]) == ("input", missing)
        assert "default" not in field["conch"] and "minimum" not in field["constraints"]
        assert parse_contract(yaml.safe_load((version / CONTRACT_FILENAME).read_text())).supplies(
            "input"
        ) is (missing == "impute")
