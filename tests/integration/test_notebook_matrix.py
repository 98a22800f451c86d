"""The whole matrix of scikit-learn families, as a notebook fits them, exported, served and compared.

Each estimator family (linear, tree, forest, HistGradientBoosting, SVM, MLP) in three notebook shapes:
fitted directly on a numeric frame with NaN where it takes them, behind a TF-IDF vectorizer fitted on
a list of strings, and behind a ColumnTransformer over text, categorical (with NaN), boolean and
numeric (with NaN) columns (HistGradientBoosting takes no sparse matrix, so no text alone). One server
(``LANG=C``) serves them all; each is called over HTTP and gRPC
and compared with ``predict`` and ``predict_proba``. ``make test`` runs one model per family in
``test_export_text.py``; this suite runs with ``pytest -m model_matrix``, and prints one line per
model: export time, label agreement and the largest probability (or value) difference.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from sklearn.base import is_classifier
from sklearn.compose import make_column_transformer
from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestClassifier, RandomForestRegressor
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.impute import SimpleImputer
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler
from sklearn.svm import SVC
from sklearn.tree import DecisionTreeClassifier

from conch.exporting import export
from conch.validation import validate_model
from tests.integration.server_process import ServerProcess
from tests.integration.test_export_text import PROTOCOLS, UNSEEN_TEXT, call, customers, feeds, texts

pytestmark = pytest.mark.model_matrix

ESTIMATORS: dict[str, Callable[[], Any]] = {
    "linear": lambda: LogisticRegression(max_iter=2000),
    "tree": lambda: DecisionTreeClassifier(max_depth=6, random_state=0),
    "forest": lambda: RandomForestClassifier(n_estimators=20, max_depth=6, random_state=0),
    "hist-gradient-boosting": lambda: HistGradientBoostingClassifier(max_iter=30, random_state=0),
    "svm": lambda: SVC(probability=True, random_state=0),
    "mlp": lambda: MLPClassifier(hidden_layer_sizes=(16,), max_iter=400, random_state=0),
    "ridge-regressor": lambda: Ridge(),
    "forest-regressor": lambda: RandomForestRegressor(n_estimators=20, max_depth=6, random_state=0),
}
TREES = {"tree", "forest", "hist-gradient-boosting", "forest-regressor"}
#: Families that take NaN themselves; the others get an imputer in front, as a notebook would.
TAKES_NAN = {"hist-gradient-boosting"}
SHAPES = ("frame", "text", "columns")


def fitted(family: str, shape: str, rng: np.random.Generator) -> tuple[Any, Any, Any]:
    """(model, export sample, rows it never saw) for one family in one notebook shape."""
    estimator = ESTIMATORS[family]()
    frame = customers(rng, 160)
    fresh = customers(rng, 32)
    fresh.loc[: len(UNSEEN_TEXT) - 1, "review"] = UNSEEN_TEXT
    label = np.where(frame["visits"] > 4, "loyal", np.where(frame["member"], "member", "casual"))
    target = label if is_classifier(estimator) else frame["visits"] * 1.5 + frame["member"]
    if shape == "text":
        review = frame["review"].tolist()
        model = make_pipeline(TfidfVectorizer(ngram_range=(1, 2)), estimator).fit(review, target)
        return model, review[:40], UNSEEN_TEXT + texts(rng, 25)
    if shape == "frame":
        numbers = frame[["age", "visits", "member"]]
        model = estimator if family in TAKES_NAN else make_pipeline(SimpleImputer(), estimator)
        return model.fit(numbers, target), numbers.iloc[:60], fresh[["age", "visits", "member"]]
    # Trees need no scaling, and a notebook gives them none: a scaled value computed in float32 can
    # fall on the other side of a split than the notebook's float64 one (the export refuses that).
    scaling = [] if family in TREES else [StandardScaler()]
    columns = make_column_transformer(
        (TfidfVectorizer(), "review"),
        (
            make_pipeline(SimpleImputer(strategy="most_frequent"), OneHotEncoder(handle_unknown="ignore")),
            ["city"],
        ),
        (make_pipeline(SimpleImputer(), *scaling), ["age", "visits"]),
        ("passthrough", ["member"]),
        sparse_threshold=0,
    )
    return make_pipeline(columns, estimator).fit(frame, target), frame.iloc[:60], fresh


#: HistGradientBoosting takes no sparse matrix, which is what a vectorizer gives it.
CASES = [
    (family, shape)
    for family in ESTIMATORS
    for shape in SHAPES
    if (family, shape) != ("hist-gradient-boosting", "text")
]


@pytest.fixture(scope="module")
def served(
    start_server: Callable[..., ServerProcess], tmp_path_factory: pytest.TempPathFactory
) -> tuple[ServerProcess, dict[str, tuple[Any, Any, float]]]:
    repository = tmp_path_factory.mktemp("matrix")
    rng = np.random.default_rng(5)
    models = {}
    for family, shape in CASES:
        model, sample, rows = fitted(family, shape, rng)
        name = f"{family}-{shape}"
        started = time.perf_counter()
        export(model, sample, repository=repository, name=name)
        seconds = time.perf_counter() - started
        assert [f for f in validate_model(repository / name) if f.is_error] == []
        models[name] = (model, rows, seconds)
    return start_server(repository, env={"LANG": "C", "LC_ALL": "C"}), models


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("family, shape", CASES)
def test_every_family_answers_as_the_notebook(
    served: tuple[ServerProcess, dict[str, tuple[Any, Any, float]]], family: str, shape: str, protocol: str
) -> None:
    server, models = served
    name = f"{family}-{shape}"
    model, rows, seconds = models[name]
    arrays = feeds("reviews", rows) if shape == "text" else feeds(name, rows)

    result = call(protocol, server, name, arrays)

    if is_classifier(model):
        labels = np.array([v.decode() for v in result.as_numpy("label").ravel()])
        agreement = float(np.mean(labels == model.predict(rows)))
        difference = float(np.abs(result.as_numpy("probabilities") - model.predict_proba(rows)).max())
    else:
        values = result.as_numpy("variable").ravel()
        agreement = 1.0
        difference = float(np.abs(values - model.predict(rows)).max())
    print(
        f"\nmatrix {name} {protocol}: export {seconds:.2f} s, labels {agreement:.0%}, "
        f"max difference {difference:.2g}"
    )
    assert agreement == 1.0
    assert difference < 1e-3
