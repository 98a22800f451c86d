"""Every data set that ships with scikit-learn, as a DataFrame as it comes, through export, serve and a call.

Each data set gets a pipeline a notebook would write: imputation and scaling of its own columns, a
one-hot encoding of an added text column, and an estimator. Some values are made missing. The frame is
exported as it is (``load_wine``'s ``od280/od315_of_diluted_wines`` and ``load_iris``'s
``sepal length (cm)`` included), served by a real ``conch serve``, and called with
``conch.client.infer_frame`` over HTTP and gRPC and with plain ``tritonclient`` naming the original
columns; every answer is compared with the pipeline's own ``predict`` and ``predict_proba``.
A second group covers the column kinds of real frames: integer names, names equal after cleaning,
``category``, ``bool`` and pandas' nullable dtypes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from sklearn import datasets
from sklearn.compose import ColumnTransformer
from sklearn.impute import SimpleImputer
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

from conch.client import infer_frame
from conch.exporting import export
from tests.integration.server_process import ServerProcess

LOADERS: dict[str, tuple[Callable[..., Any], bool]] = {
    "iris": (datasets.load_iris, True),
    "wine": (datasets.load_wine, True),
    "breast-cancer": (datasets.load_breast_cancer, True),
    "diabetes": (datasets.load_diabetes, False),
    "digits": (datasets.load_digits, True),
    "linnerud": (datasets.load_linnerud, False),
}
PROTOCOLS = ("http", "grpc")


def data_set(name: str) -> tuple[pd.DataFrame, Any, Pipeline]:
    """The data set as a frame with an added text column and missing values, and its fitted pipeline."""
    loader, classifies = LOADERS[name]
    bunch = loader(as_frame=True)
    frame = bunch.data.copy()
    frame["region"] = np.array(["north", "south", "east"])[np.arange(len(frame)) % 3]
    frame.iloc[::7, 0] = np.nan
    numbers = [column for column in frame.columns if column != "region"]
    features = ColumnTransformer(
        [
            ("numbers", make_pipeline(SimpleImputer(), StandardScaler()), numbers),
            ("region", OneHotEncoder(handle_unknown="ignore"), ["region"]),
        ]
    )
    estimator = LogisticRegression(max_iter=3000) if classifies else Ridge()
    return frame, bunch.target, make_pipeline(features, estimator).fit(frame, bunch.target)


def kinds_frame(rows: int = 60) -> pd.DataFrame:
    """Columns as real frames have them: awkward names, categories, booleans and nullable dtypes."""
    rng = np.random.default_rng(3)
    gaps = rng.random((2, rows)) < 0.2
    return pd.DataFrame(
        {
            "a b": rng.normal(size=rows),
            "a_b": rng.normal(size=rows),
            "a-b": rng.normal(size=rows),
            "colour": pd.Categorical(rng.choice(["red", "green"], rows)),
            "flag": rng.random(rows) < 0.5,
            "count": pd.array(np.where(gaps[0], None, rng.integers(0, 5, rows)), dtype="Int64"),
            "known": pd.array(np.where(gaps[1], None, rng.random(rows) < 0.5), dtype="boolean"),
            "plan": pd.array(rng.choice(["basic", "plus"], rows), dtype="string"),
        }
    )


def kinds_pipeline(frame: pd.DataFrame) -> Pipeline:
    numbers = ["a b", "a_b", "a-b", "flag", "count", "known"]
    features = ColumnTransformer(
        [
            ("numbers", make_pipeline(SimpleImputer(), StandardScaler()), numbers),
            ("text", OneHotEncoder(handle_unknown="ignore"), ["colour", "plan"]),
        ]
    )
    target = (frame["a b"] + frame["a-b"] > 0).to_numpy().astype(int)
    return make_pipeline(features, LogisticRegression()).fit(frame, target)


def numbered_frame(rows: int = 60) -> tuple[pd.DataFrame, Pipeline]:
    """A frame made from an array, so its columns are the integers 0..3 (scikit-learn refuses a mix)."""
    rng = np.random.default_rng(4)
    frame = pd.DataFrame(rng.normal(size=(rows, 4)))
    frame.iloc[::5, 2] = np.nan
    scaled = make_pipeline(SimpleImputer(), StandardScaler())
    features = ColumnTransformer([("numbers", scaled, [0, 1, 2, 3])])
    pipeline = make_pipeline(features, LogisticRegression()).fit(frame, (frame[0] > frame[1]).astype(int))
    return frame, pipeline


@pytest.fixture(scope="module")
def served(
    start_server: Callable[..., ServerProcess], tmp_path_factory: pytest.TempPathFactory
) -> tuple[ServerProcess, dict[str, tuple[pd.DataFrame, Pipeline]], Path]:
    repository = tmp_path_factory.mktemp("frames")
    fitted = {}
    for name in LOADERS:
        frame, _, pipeline = data_set(name)
        export(pipeline, frame.head(50), repository=repository, name=name)
        fitted[name] = (frame, pipeline)
    frame = kinds_frame()
    pipeline = kinds_pipeline(frame)
    export(pipeline, frame.head(30), repository=repository, name="kinds")
    fitted["kinds"] = (frame, pipeline)
    frame, pipeline = numbered_frame()
    export(pipeline, frame.head(30), repository=repository, name="numbered")
    fitted["numbered"] = (frame, pipeline)
    return start_server(repository), fitted, repository


def expected(pipeline: Pipeline, rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray | None]:
    probabilities = pipeline.predict_proba(rows) if hasattr(pipeline, "predict_proba") else None
    return pipeline.predict(rows), probabilities


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("name", [*LOADERS, "kinds", "numbered"])
def test_infer_frame_answers_as_the_pipeline(
    served: tuple[ServerProcess, dict[str, tuple[pd.DataFrame, Pipeline]], Path], name: str, protocol: str
) -> None:
    server, fitted, _ = served
    frame, pipeline = fitted[name]
    # More rows than the exported max_batch_size of 32, so infer_frame sends two requests.
    rows = frame.sample(min(45, len(frame)), random_state=5)
    url = f"{protocol}://{server.http_url if protocol == 'http' else server.grpc_url}"

    answers = infer_frame(url, name, rows)

    labels, probabilities = expected(pipeline, rows)
    assert list(answers.index) == list(rows.index)
    predicted = answers.filter(regex=r"^(label|variable)(_\d+)?$").to_numpy()
    np.testing.assert_allclose(predicted.reshape(labels.shape), labels, rtol=1e-4, atol=1e-3)
    if probabilities is not None:
        served_probabilities = answers.filter(regex=r"^probabilities_\d+$").to_numpy()
        np.testing.assert_allclose(served_probabilities, probabilities, atol=1e-5)


def test_renamed_columns_are_recorded_in_metadata_and_config(
    served: tuple[ServerProcess, dict[str, tuple[pd.DataFrame, Pipeline]], Path],
) -> None:
    server, _, repository = served
    wanted = {"od280/od315_of_diluted_wines": "od280_od315_of_diluted_wines"}

    metadata = json.loads((repository / "wine" / "1" / "metadata.json").read_text())
    config = server.request("GET", "/v2/models/wine/config").json()
    inputs = [entry["name"] for entry in server.request("GET", "/v2/models/wine").json()["inputs"]]

    assert metadata["column_inputs"] == wanted
    assert json.loads(config["parameters"]["conch.column_inputs"]["string_value"]) == wanted
    assert "od280_od315_of_diluted_wines" in inputs
    assert "od280/od315_of_diluted_wines" in metadata["feature_names"]
    kinds = json.loads((repository / "kinds" / "1" / "metadata.json").read_text())["column_inputs"]
    assert kinds == {"a b": "a_b_2", "a-b": "a_b_3"}
    numbered = json.loads((repository / "numbered" / "1" / "metadata.json").read_text())["column_inputs"]
    assert numbered == {str(i): f"column_{i}" for i in range(4)}
    iris = json.loads((repository / "iris" / "1" / "metadata.json").read_text())["column_inputs"]
    assert iris["sepal length (cm)"] == "sepal_length_cm"


def test_the_kinds_of_column_get_their_tensor_types(
    served: tuple[ServerProcess, dict[str, tuple[pd.DataFrame, Pipeline]], Path],
) -> None:
    server, _, _ = served
    metadata = server.request("GET", "/v2/models/kinds").json()
    types = {entry["name"]: entry["datatype"] for entry in metadata["inputs"]}

    assert types == {
        "a_b_2": "FP32",
        "a_b": "FP32",
        "a_b_3": "FP32",
        "colour": "BYTES",
        "flag": "FP32",
        "count": "FP32",
        "known": "FP32",
        "plan": "BYTES",
    }


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=PROTOCOLS)
def test_a_client_may_name_the_original_columns(
    served: tuple[ServerProcess, dict[str, tuple[pd.DataFrame, Pipeline]], Path], module: Any
) -> None:
    server, fitted, _ = served
    frame, pipeline = fitted["wine"]
    rows = frame.head(3)
    inputs = []
    for column in frame.columns:  # the frame's own names, slash included
        values = rows[column]
        text = column == "region"
        array = values.to_numpy(object if text else np.float32).reshape(-1, 1)
        tensor = module.InferInput(str(column), list(array.shape), "BYTES" if text else "FP32")
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    client = module.InferenceServerClient(server.http_url if module is httpclient else server.grpc_url)

    result = client.infer("wine", inputs)

    np.testing.assert_array_equal(result.as_numpy("label").ravel(), pipeline.predict(rows))


def test_infer_frame_names_what_the_frame_lacks(
    served: tuple[ServerProcess, dict[str, tuple[pd.DataFrame, Pipeline]], Path],
) -> None:
    server, fitted, _ = served
    frame, _ = fitted["wine"]

    with pytest.raises(ValueError, match=r"no column for the model's input\(s\) \['alcohol'\]"):
        infer_frame(server.http_url, "wine", frame.drop(columns=["alcohol"]).head(2))
