"""Frames as notebooks fit them: bare estimators on a frame, missing text values, and classes recorded.

Each export passed its own check against ``predict`` and ``predict_proba`` on the sample; the tests
then look at the interface written (one input per column), what is refused and how, what a
disagreement says, and where the classes went.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pandas as pd
import pytest
from sklearn.compose import make_column_transformer
from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestRegressor
from sklearn.impute import SimpleImputer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder, OrdinalEncoder

from conch.core.classification import labels_for
from conch.exporting import DisagreementError, ExportError, export
from conch.exporting.missing_text import likely_causes
from conch.exporting.text_pipelines import SERVED_LOCALE
from conch.validation import Severity, validate_model


def numbers_frame(rows: int = 80) -> tuple[pd.DataFrame, np.ndarray]:
    rng = np.random.default_rng(7)
    frame = pd.DataFrame(
        {
            "age (years)": np.where(rng.random(rows) < 0.1, np.nan, rng.normal(40, 9, rows)),
            "visits": rng.integers(0, 12, rows),
            "member": rng.random(rows) < 0.4,
        }
    )
    target = np.array(["stay", "leave", "upgrade"])[(frame["visits"].to_numpy() + frame["member"]) % 3]
    return frame, target


def city_frame(rows: int = 40, empty: bool = False) -> tuple[pd.DataFrame, list[int]]:
    cities = ["Paris", "Lyon", None, "Nice", "" if empty else "Lille"]
    frame = pd.DataFrame({"city": [cities[i % 5] for i in range(rows)], "x": np.arange(rows, dtype=float)})
    return frame, [i % 2 for i in range(rows)]


def run(version_dir: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ort.InferenceSession(str(version_dir / "model.onnx")).run(None, feeds)


@pytest.mark.parametrize(
    "estimator",
    [HistGradientBoostingClassifier(max_iter=4), make_pipeline(SimpleImputer(), LogisticRegression())],
    ids=["bare HistGradientBoosting", "pipeline without ColumnTransformer"],
)
def test_an_estimator_fitted_on_a_frame_takes_one_input_per_column(tmp_path: Path, estimator: Any) -> None:
    frame, target = numbers_frame()
    model = estimator.fit(frame, target)

    version_dir = export(model, frame, repository=tmp_path, name="churn")

    metadata = json.loads((version_dir / "metadata.json").read_text())
    assert [(t["name"], t["datatype"]) for t in metadata["inputs"]] == [
        ("age_years", "FP32"),
        ("visits", "INT64"),
        ("member", "FP32"),
    ]
    assert metadata["column_inputs"] == {"age (years)": "age_years"}
    feeds = {
        "age_years": frame[["age (years)"]].to_numpy(np.float32),
        "visits": frame[["visits"]].to_numpy(np.int64),
        "member": frame[["member"]].to_numpy(np.float32),
    }
    labels, probabilities = run(version_dir, feeds)
    np.testing.assert_array_equal(labels.ravel(), model.predict(frame))
    np.testing.assert_allclose(probabilities, model.predict_proba(frame), atol=1e-5)


def test_a_regressor_fitted_on_a_frame_exports(tmp_path: Path) -> None:
    frame, _ = numbers_frame()
    frame = frame.fillna(0.0)
    model = RandomForestRegressor(n_estimators=5, random_state=0).fit(frame, frame["visits"] * 2.5)

    assert export(model, frame, repository=tmp_path, name="spend").is_dir()


def test_text_columns_in_a_frame_read_as_a_matrix_are_refused_by_name(tmp_path: Path) -> None:
    frame, target = numbers_frame()
    frame["plan"] = pd.Categorical(np.where(frame["member"], "plus", "basic"))
    model = HistGradientBoostingClassifier(max_iter=2, categorical_features="from_dtype").fit(frame, target)

    with pytest.raises(ExportError, match=r"\['plan'\] hold text.*OneHotEncoder"):
        export(model, frame, repository=tmp_path, name="churn")


@pytest.mark.parametrize(
    "encoder",
    [
        make_pipeline(SimpleImputer(strategy="most_frequent"), OneHotEncoder(handle_unknown="ignore")),
        make_pipeline(
            SimpleImputer(strategy="constant", fill_value="unknown"), OneHotEncoder(handle_unknown="ignore")
        ),
        OneHotEncoder(handle_unknown="ignore"),
    ],
    ids=["most frequent", "constant", "NaN learned as a category"],
)
def test_missing_text_values_are_treated_as_the_pipeline_treats_them(tmp_path: Path, encoder: Any) -> None:
    frame, target = city_frame()
    model = make_pipeline(
        make_column_transformer((encoder, ["city"]), remainder="passthrough"), LogisticRegression()
    ).fit(frame, target)
    assert frame["city"].isna().any()

    version_dir = export(model, frame, repository=tmp_path, name="cities")

    unseen = pd.DataFrame({"city": [None, np.nan, "Paris", "Tours"], "x": [1.0, 2.0, 3.0, 4.0]})
    feeds = {"city": np.array(["", "", "Paris", "Tours"], dtype=object).reshape(-1, 1)}
    feeds["x"] = unseen[["x"]].to_numpy(np.float32)
    _, probabilities = run(version_dir, feeds)
    np.testing.assert_allclose(probabilities, model.predict_proba(unseen), atol=1e-5)


def test_a_disagreement_names_rows_and_the_likely_cause_first(tmp_path: Path) -> None:
    frame, target = city_frame()
    encoder = OrdinalEncoder(handle_unknown="use_encoded_value", unknown_value=-1, encoded_missing_value=-2)
    model = make_pipeline(
        make_column_transformer((encoder, ["city"]), remainder="passthrough"), LogisticRegression()
    ).fit(frame, target)

    with pytest.raises(DisagreementError) as raised:
        export(model, frame, repository=tmp_path, name="cities")

    missing_rows = np.flatnonzero(frame["city"].isna()).tolist()
    assert set(raised.value.rows) <= set(missing_rows)
    assert raised.value.causes[0].startswith("column 'city' holds a missing text value")
    message = str(raised.value)
    assert message.index("Likely cause: column 'city'") < message.index("  - output '")


def test_an_empty_string_beside_missing_values_is_named_as_the_cause(tmp_path: Path) -> None:
    frame, target = city_frame(empty=True)
    model = make_pipeline(
        make_column_transformer((OneHotEncoder(handle_unknown="ignore"), ["city"]), remainder="passthrough"),
        LogisticRegression(),
    ).fit(frame, target)

    with pytest.raises(DisagreementError, match=r"holds the empty string .*replace\('', 'blank'\)"):
        export(model, frame, repository=tmp_path, name="cities")


def test_classes_are_recorded_and_each_version_keeps_its_labels(tmp_path: Path) -> None:
    frame, target = numbers_frame()
    frame = frame.fillna(40.0)
    first = LogisticRegression().fit(frame, target)
    second = LogisticRegression().fit(frame, np.char.upper(target.astype(str)))

    one = export(first, frame, repository=tmp_path, name="churn")
    two = export(second, frame, repository=tmp_path, name="churn")

    for version_dir, model in ((one, first), (two, second)):
        classes = [str(c) for c in model.classes_]
        assert json.loads((version_dir / "metadata.json").read_text())["classes"] == {
            "probabilities": classes
        }
        assert (version_dir / "probabilities_labels.txt").read_text().splitlines() == classes
        served = labels_for(tmp_path / "churn", "probabilities_labels.txt", "churn", version_dir)
        assert served == classes  # what the classification extension names, version by version
    assert 'label_filename: "probabilities_labels.txt"' in (tmp_path / "churn" / "config.pbtxt").read_text()
    first_classes = [str(c) for c in first.classes_]  # Triton reads the model folder's copy: the first's
    assert (tmp_path / "churn" / "probabilities_labels.txt").read_text().splitlines() == first_classes


def test_validate_names_a_missing_locale_as_the_cause(tmp_path: Path) -> None:
    texts = ["Alpha beta", "GAMMA delta", "beta gamma"]
    from sklearn.feature_extraction.text import TfidfVectorizer

    model = make_pipeline(TfidfVectorizer(), LogisticRegression()).fit(texts, [0, 1, 0])
    version_dir = export(model, texts, repository=tmp_path, name="reviews")
    path = version_dir / "model.onnx"
    graph = onnx.load(str(path))
    for node in graph.graph.node:
        for attribute in node.attribute:
            if attribute.name == "locale":
                assert attribute.s == SERVED_LOCALE.encode()
                attribute.s = b"zz_ZZ.UTF-8"  # what an export with another tool asks for
    onnx.save(graph, str(path))

    findings = [f for f in validate_model(tmp_path / "reviews") if f.severity is Severity.ERROR]

    assert any("locale 'zz_ZZ.UTF-8'" in f.hint and "C.UTF-8" in f.hint for f in findings), findings


def test_a_category_never_seen_in_fitting_is_named_as_a_cause() -> None:
    frame, target = city_frame()
    model = make_pipeline(
        make_column_transformer((OneHotEncoder(handle_unknown="ignore"), ["city"]), remainder="passthrough"),
        LogisticRegression(),
    ).fit(frame, target)
    sample = frame.copy()
    sample.loc[3, "city"] = "Tours"

    causes = likely_causes(model, sample)([3])

    assert causes == [
        "column 'city' holds categories never seen in fitting, such as 'Tours': fit the encoder with "
        "handle_unknown='ignore', or on data that holds them"
    ]
    assert likely_causes(model, sample)([4]) == []


def test_a_text_imputer_with_an_indicator_is_refused_by_column_with_the_fix(tmp_path: Path) -> None:
    frame, target = city_frame()
    imputer = SimpleImputer(strategy="most_frequent", add_indicator=True)
    model = make_pipeline(
        make_column_transformer(
            (make_pipeline(imputer, OneHotEncoder(handle_unknown="ignore")), ["city"]),
            remainder="passthrough",
        ),
        LogisticRegression(),
    ).fit(frame, target)

    with pytest.raises(ExportError, match=r"\['city'\] are imputed with add_indicator=True.*isna\(\)"):
        export(model, frame, repository=tmp_path, name="cities")
    assert not (tmp_path / "cities").exists()
