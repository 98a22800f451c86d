"""XGBoost, LightGBM and CatBoost through ``conch.export``: converted, run by ONNX Runtime and compared
with ``predict`` and ``predict_proba`` on the sample (the export's own check), and the version folder
records what made it. The regressors and pipelines run in the model_matrix suite; a model of no known
library gets a pointer to what to install.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pandas as pd
import pytest
from sklearn.base import BaseEstimator, ClassifierMixin

from conch.exporting import export
from conch.exporting.errors import ExportError
from conch.packaging.metadata import read_metadata
from tests.fixtures import boosted_models
from tests.fixtures.boosted_models import LIBRARIES, applicants, measurements


def run(version_dir: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(str(version_dir / "model.onnx"))
    names = [output.name for output in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds), strict=True))


@pytest.mark.parametrize("library", LIBRARIES)
def test_classifier_exports_and_answers_as_predict_proba(library: str, tmp_path: Path) -> None:
    model = boosted_models.classifier(library)
    version_dir = export(model, measurements(30, seed=1), repository=tmp_path, name=f"{library}-clf")

    rows = measurements(50, seed=2)
    served = run(version_dir, {"input": rows})
    assert served["label"].ravel().tolist() == np.asarray(model.predict(rows)).ravel().tolist()
    np.testing.assert_allclose(served["probabilities"], model.predict_proba(rows), atol=1e-5)
    metadata = read_metadata(version_dir)
    assert metadata.framework["name"] == library
    assert metadata.framework["model_class"].startswith(f"{library}.")
    assert any(name.startswith(library) for name in metadata.libraries)
    labels = (version_dir / "probabilities_labels.txt").read_text().split()
    assert labels == [str(c) for c in model.classes_]


@pytest.mark.model_matrix
@pytest.mark.parametrize("library", LIBRARIES)
def test_regressor_exports_and_answers_as_predict(library: str, tmp_path: Path) -> None:
    model = boosted_models.regressor(library)
    version_dir = export(model, measurements(30, seed=1), repository=tmp_path, name=f"{library}-reg")

    rows = measurements(50, seed=3)
    (predictions,) = run(version_dir, {"input": rows}).values()
    np.testing.assert_allclose(predictions.ravel(), model.predict(rows), rtol=1e-4, atol=1e-4)


@pytest.mark.model_matrix
@pytest.mark.parametrize("library", LIBRARIES)
def test_column_transformer_pipeline_exports_with_missing_numbers(library: str, tmp_path: Path) -> None:
    model = boosted_models.pipeline(library)
    sample = applicants(40, seed=1)
    assert sample["income"].isna().any()
    version_dir = export(model, sample, repository=tmp_path, name=f"{library}-pipe")

    rows = applicants(60, seed=4)
    feeds = {
        "age": rows[["age"]].to_numpy(np.float32),
        "income": rows[["income"]].to_numpy(np.float32),
        "city": rows[["city"]].to_numpy(object),
    }
    served = run(version_dir, feeds)
    assert served["label"].ravel().tolist() == model.predict(rows).tolist()
    np.testing.assert_allclose(served["probabilities"], model.predict_proba(rows), atol=1e-5)
    assert read_metadata(version_dir).framework["name"] == "scikit-learn"


@pytest.mark.model_matrix
@pytest.mark.parametrize("library", LIBRARIES)
def test_a_model_fitted_on_a_frame_exports_with_the_frame(library: str, tmp_path: Path) -> None:
    frame = pd.DataFrame(measurements(150), columns=["age", "income", "debt ratio", "score", "tenure"])
    model = boosted_models.fitted_on(library, frame)
    version_dir = export(model, frame.head(20), repository=tmp_path, name=f"{library}-frame")

    rows = pd.DataFrame(measurements(40, seed=6), columns=frame.columns)
    feeds = {
        name: rows[[column]].to_numpy(np.float32)
        for column, name in zip(
            frame.columns, ["age", "income", "debt_ratio", "score", "tenure"], strict=True
        )
    }
    served = run(version_dir, feeds)
    assert served["label"].ravel().tolist() == np.asarray(model.predict(rows)).ravel().tolist()
    np.testing.assert_allclose(served["probabilities"], model.predict_proba(rows), atol=1e-5)
    if library == "xgboost":  # converted by position from a copy: the notebook's booster keeps its names
        assert model.get_booster().feature_names == list(frame.columns)


class Unconvertible(ClassifierMixin, BaseEstimator):
    """A classifier of a library skl2onnx has no converter for."""

    def fit(self, features: np.ndarray, labels: np.ndarray) -> Unconvertible:
        self.classes_ = np.unique(labels)
        return self

    def predict(self, features: np.ndarray) -> np.ndarray:
        return np.zeros(len(features), dtype=int)


def test_a_model_without_a_converter_is_refused_with_what_to_install(tmp_path: Path) -> None:
    features = measurements(20)
    model = Unconvertible().fit(features, np.arange(20) % 2)

    with pytest.raises(ExportError) as refused:
        export(model, features, repository=tmp_path, name="odd")

    message = str(refused.value)
    assert "no converter for tests.unit.exporting.test_export_boosted_trees.Unconvertible" in message
    assert "pip install 'conch[boosting]'" in message
    assert "Unable to find a shape calculator" not in message
    assert list(tmp_path.iterdir()) == []


def test_boosted_libraries_are_recorded_with_their_converter(tmp_path: Path) -> None:
    version_dir = export(
        boosted_models.classifier("lightgbm"), measurements(10), repository=tmp_path, name="lgbm"
    )
    recorded = json.loads((version_dir / "metadata.json").read_text())["libraries"]
    assert {"lightgbm", "onnxmltools", "skl2onnx", "scikit-learn"} <= set(recorded)


def test_a_new_version_records_its_expected_agreement_with_the_one_before(tmp_path: Path) -> None:
    export(boosted_models.pipeline("xgboost"), applicants(20), repository=tmp_path, name="approvals")
    version_dir = export(
        boosted_models.pipeline("catboost"),
        applicants(20),
        repository=tmp_path,
        name="approvals",
        reference=applicants(300, seed=5),
    )

    expected = read_metadata(version_dir).extra["expected_agreement"]
    assert (expected["against_version"], expected["rows"], expected["self_agreement"]) == (1, 300, 1.0)
    assert 0.5 < expected["lower"] <= expected["value"] <= expected["upper"] <= 1.0
