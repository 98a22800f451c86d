"""Notebook models as they come, exported, validated, served in a C-locale-only process and called.

Four models a data scientist writes: a TF-IDF pipeline fitted on a list, a character n-gram pipeline
fitted on a Series and exported with a one-column frame, a ColumnTransformer over text, categorical,
boolean and numeric columns (NaN in the categorical text and in the numbers), and a bare
HistGradientBoostingClassifier fitted on a frame. The server runs with ``LANG=C LC_ALL=C``, as a slim
image would. Each model is called over HTTP and gRPC with plain tritonclient on rows the export never
saw (accents, capitals, emoji, empty strings), and compared with the notebook's ``predict`` and
``predict_proba``. Bad input gets a 400 that names the input.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from sklearn.compose import make_column_transformer
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer
from sklearn.impute import SimpleImputer
from sklearn.linear_model import LogisticRegression
from sklearn.naive_bayes import MultinomialNB
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler
from tritonclient.utils import InferenceServerException

from conch.client import infer_frame
from conch.exporting import export
from conch.validation import validate_model
from tests.integration.server_process import ServerProcess

PROTOCOLS = ("http", "grpc")
WORDS = ["great", "food", "terrible", "service", "École", "CAFÉ", "naïve", "🙂", "slow", "the", "and", "ok"]
#: Rows no export saw: capitals and accents, emoji alone, empty text, a stop word alone, white space.
UNSEEN_TEXT = ["", "the", "ÉCOLE CAFÉ", "🙂🙂", "Straße  und\tcafé", "TERRIBLE service!!", "ok ok ok"]


def texts(rng: np.random.Generator, rows: int) -> list[str]:
    return [" ".join(rng.choice(WORDS, rng.integers(0, 6))) for _ in range(rows)]


def customers(rng: np.random.Generator, rows: int) -> pd.DataFrame:
    frame = pd.DataFrame(
        {
            "review": texts(rng, rows),
            "city": rng.choice(np.array(["Paris", "Lyon", "Nice", "Évry", None], dtype=object), rows),
            "member": rng.random(rows) < 0.5,
            "age": np.where(rng.random(rows) < 0.15, np.nan, rng.normal(40, 10, rows).round()),
            "visits": rng.integers(0, 9, rows),
        }
    )
    frame["city"] = frame["city"].astype("str").where(frame["city"].notna())  # pandas' missing string
    return frame


def notebook() -> dict[str, tuple[Any, Any, Any]]:
    """Each model by name: (fitted model, export sample, rows the export never saw)."""
    rng = np.random.default_rng(11)
    review_text = texts(rng, 120)
    sentiment = np.array(["bad", "good", "mixed"])[[len(t) % 3 for t in review_text]]
    reviews = make_pipeline(
        TfidfVectorizer(ngram_range=(1, 2), stop_words="english"), LogisticRegression(max_iter=500)
    ).fit(review_text, sentiment)
    tickets_text = pd.Series(texts(rng, 120), name="ticket")
    tickets = make_pipeline(CountVectorizer(analyzer="char", ngram_range=(2, 4)), MultinomialNB()).fit(
        tickets_text, sentiment
    )
    frame = customers(rng, 150)
    target = np.where(frame["visits"] > 4, "loyal", np.where(frame["member"], "member", "casual"))
    columns = make_column_transformer(
        (TfidfVectorizer(), "review"),
        (
            make_pipeline(SimpleImputer(strategy="most_frequent"), OneHotEncoder(handle_unknown="ignore")),
            ["city"],
        ),
        (make_pipeline(SimpleImputer(), StandardScaler()), ["age", "visits"]),
        ("passthrough", ["member"]),
    )
    mixed = make_pipeline(columns, LogisticRegression(max_iter=1000)).fit(frame, target)
    numbers = frame[["age", "visits", "member"]]
    churn = HistGradientBoostingClassifier(max_iter=10, random_state=0).fit(numbers, target)
    fresh = customers(rng, 32)
    fresh.loc[: len(UNSEEN_TEXT) - 1, "review"] = UNSEEN_TEXT
    return {
        "reviews": (reviews, review_text[:40], UNSEEN_TEXT + texts(rng, 25)),
        "tickets": (tickets, tickets_text[:40].to_frame(), UNSEEN_TEXT + texts(rng, 25)),
        "customers": (mixed, frame.iloc[:60], fresh),
        "churn": (churn, numbers.iloc[:60], fresh[["age", "visits", "member"]]),
    }


@pytest.fixture(scope="module")
def served(
    start_server: Callable[..., ServerProcess], tmp_path_factory: pytest.TempPathFactory
) -> tuple[ServerProcess, dict[str, tuple[Any, Any, Any]], dict[str, float]]:
    repository = tmp_path_factory.mktemp("notebook-models")
    models = notebook()
    export_seconds = {}
    for name, (model, sample, _) in models.items():
        started = time.perf_counter()
        export(model, sample, repository=repository, name=name)
        export_seconds[name] = time.perf_counter() - started
        errors = [f for f in validate_model(repository / name) if f.is_error]
        assert errors == [], errors
    server = start_server(repository, env={"LANG": "C", "LC_ALL": "C", "LC_CTYPE": "C"})
    return server, models, export_seconds


def feeds(name: str, rows: Any) -> dict[str, np.ndarray]:
    if name in ("reviews", "tickets"):
        text_input = "text" if name == "reviews" else "ticket"
        return {text_input: np.array([t.encode() for t in rows], dtype=object).reshape(-1, 1)}
    result = {}
    for column in rows.columns:
        values = rows[[column]]
        if values[column].dtype.kind in "iu":
            result[column] = values.to_numpy(np.int64)
        elif values[column].dtype.kind in "fb":
            result[column] = values.to_numpy(np.float32)
        else:
            result[column] = np.array([[b"" if v is None or v != v else v.encode()] for v in values[column]])
    return result


def call(protocol: str, server: ServerProcess, model: str, arrays: dict[str, np.ndarray]) -> Any:
    module = httpclient if protocol == "http" else grpcclient
    url = server.http_url if protocol == "http" else server.grpc_url
    client = module.InferenceServerClient(url)
    try:
        inputs = []
        for input_name, values in arrays.items():
            datatype = {"f": "FP32", "i": "INT64", "O": "BYTES", "S": "BYTES"}[values.dtype.kind]
            tensor = module.InferInput(input_name, list(values.shape), datatype)
            tensor.set_data_from_numpy(values)
            inputs.append(tensor)
        return client.infer(model, inputs)
    finally:
        client.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("name", ["reviews", "tickets", "customers", "churn"])
def test_the_served_model_answers_as_the_notebook(
    served: tuple[ServerProcess, dict[str, tuple[Any, Any, Any]], dict[str, float]], name: str, protocol: str
) -> None:
    server, models, export_seconds = served
    model, _, rows = models[name]

    result = call(protocol, server, name, feeds(name, rows))

    labels = np.array([v.decode() for v in result.as_numpy("label").ravel()])
    probabilities = result.as_numpy("probabilities")
    agreement = float(np.mean(labels == model.predict(rows)))
    difference = float(np.abs(probabilities - model.predict_proba(rows)).max())
    print(
        f"\nmatrix {name} {protocol}: export {export_seconds[name]:.2f} s, labels {agreement:.0%}, "
        f"max probability difference {difference:.2g}, {len(labels)} rows"
    )
    assert agreement == 1.0
    assert difference < 1e-4


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_classes_name_the_columns_and_the_classification_extension(
    served: tuple[ServerProcess, dict[str, tuple[Any, Any, Any]], dict[str, float]], protocol: str
) -> None:
    server, models, _ = served
    model, _, rows = models["customers"]
    url = f"{protocol}://{server.http_url if protocol == 'http' else server.grpc_url}"

    answers = infer_frame(url, "customers", rows)

    classes = [str(c) for c in model.classes_]
    assert [c for c in answers.columns if c.startswith("probabilities_")] == [
        f"probabilities_{c}" for c in classes
    ]
    expected = pd.DataFrame(model.predict_proba(rows), columns=[f"probabilities_{c}" for c in classes])
    np.testing.assert_allclose(answers[expected.columns].to_numpy(), expected.to_numpy(), atol=1e-4)

    module = httpclient if protocol == "http" else grpcclient
    client = module.InferenceServerClient(url.split("://")[1])
    arrays = feeds("reviews", ["ÉCOLE café"])
    text = module.InferInput("text", [1, 1], "BYTES")
    text.set_data_from_numpy(arrays["text"])
    top = client.infer(
        "reviews", [text], outputs=[module.InferRequestedOutput("probabilities", class_count=3)]
    )
    client.close()
    reviews = models["reviews"][0]
    named = [entry.decode().split(":", 2)[2] for entry in top.as_numpy("probabilities").ravel()]
    assert sorted(named) == sorted(str(c) for c in reviews.classes_)
    assert named[0] == reviews.predict(["ÉCOLE café"])[0]


BAD_INPUTS = {
    "text called with numbers": ("reviews", {"text": np.ones((2, 1), np.float32)}, "text"),
    # A frame missing a column is served: the data contract imputes it or fills its default.
    "a frame with a column the model lacks": (
        "churn",
        {"age": np.ones((2, 1), np.float32), "income": np.ones((2, 1), np.float32)},
        "income",
    ),
    "a column of the wrong kind": (
        "churn",
        {
            "age": np.array([[b"forty"], [b"fifty"]], dtype=object),
            "visits": np.ones((2, 1), np.int64),
            "member": np.ones((2, 1), np.float32),
        },
        "age",
    ),
}


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_a_400_naming_the_input(
    served: tuple[ServerProcess, dict[str, tuple[Any, Any, Any]], dict[str, float]], case: str, protocol: str
) -> None:
    server, _, _ = served
    model, arrays, input_name = BAD_INPUTS[case]

    with pytest.raises(InferenceServerException) as raised:
        call(protocol, server, model, arrays)

    assert str(raised.value.status()) in ("400", "StatusCode.INVALID_ARGUMENT")
    assert f"'{input_name}'" in raised.value.message()
    assert "Traceback" not in raised.value.message()
    still_up = call(protocol, server, "reviews", feeds("reviews", ["still up"]))
    assert still_up.as_numpy("label").size == 1
