"""Boosted trees from a notebook to a served model: XGBoost, LightGBM and CatBoost classifiers are
exported with ``conch.export``, pass ``conch validate``'s checks, are served by a real ``conch serve``
and answer over HTTP and gRPC as the notebook's ``predict`` and ``predict_proba`` do (docs/export.md).
Regressors and ColumnTransformer pipelines run in the model_matrix suite.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from conch.exporting import export
from conch.validation import validate_model
from tests.fixtures import boosted_models
from tests.fixtures.boosted_models import LIBRARIES, applicants, measurements
from tests.integration.server_process import ServerProcess

CLIENTS = {"http": httpclient, "grpc": grpcclient}


def exported(repository: Path, models: dict[str, tuple[Any, Any]]) -> dict[str, Any]:
    """Export each (model, sample) by name, check the folder validates, and return the models."""
    for name, (model, sample) in models.items():
        version_dir = export(model, sample, repository=repository, name=name)
        errors = [finding for finding in validate_model(version_dir.parent) if finding.is_error]
        assert errors == [], errors
    return {name: model for name, (model, _) in models.items()}


@pytest.fixture(scope="module")
def classifiers(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    repository = tmp_path_factory.mktemp("boosted")
    models = {
        f"{library}-clf": (boosted_models.classifier(library), measurements(20, seed=1))
        for library in LIBRARIES
    }
    return repository, exported(repository, models)


@pytest.fixture(scope="module")
def server(
    start_server: Callable[..., ServerProcess], classifiers: tuple[Path, dict[str, Any]]
) -> ServerProcess:
    return start_server(classifiers[0])


def infer(protocol: str, server: ServerProcess, name: str, tensors: dict[str, np.ndarray]) -> Any:
    module = CLIENTS[protocol]
    client = module.InferenceServerClient(server.http_url if protocol == "http" else server.grpc_url)
    inputs = []
    for input_name, array in tensors.items():
        datatype = "BYTES" if array.dtype == object else "FP32"
        tensor = module.InferInput(input_name, list(array.shape), datatype)
        if protocol == "http":
            tensor.set_data_from_numpy(array, binary_data=True)
        else:
            tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return client.infer(name, inputs)


def assert_answers_as(model: Any, rows: Any, result: Any) -> None:
    assert result.as_numpy("label").ravel().tolist() == np.asarray(model.predict(rows)).ravel().tolist()
    np.testing.assert_allclose(result.as_numpy("probabilities"), model.predict_proba(rows), atol=1e-5)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("library", LIBRARIES)
def test_classifier_answers_as_the_notebook(
    server: ServerProcess, classifiers: tuple[Path, dict[str, Any]], library: str, protocol: str
) -> None:
    rows = measurements(30, seed=7)

    result = infer(protocol, server, f"{library}-clf", {"input": rows})

    assert_answers_as(classifiers[1][f"{library}-clf"], rows, result)


@pytest.fixture(scope="module")
def matrix(
    start_server: Callable[..., ServerProcess], tmp_path_factory: pytest.TempPathFactory
) -> tuple[ServerProcess, dict[str, Any]]:
    repository = tmp_path_factory.mktemp("boosted-matrix")
    models: dict[str, tuple[Any, Any]] = {}
    for library in LIBRARIES:
        models[f"{library}-reg"] = (boosted_models.regressor(library), measurements(20, seed=1))
        models[f"{library}-pipe"] = (boosted_models.pipeline(library), applicants(30, seed=1))
    originals = exported(repository, models)
    return start_server(repository), originals


def frame_tensors(frame: pd.DataFrame) -> dict[str, np.ndarray]:
    return {
        "age": frame[["age"]].to_numpy(np.float32),
        "income": frame[["income"]].to_numpy(np.float32),
        "city": np.array([[city.encode()] for city in frame["city"]], dtype=object),
    }


@pytest.mark.model_matrix
@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("library", LIBRARIES)
def test_regressor_answers_as_the_notebook(
    matrix: tuple[ServerProcess, dict[str, Any]], library: str, protocol: str
) -> None:
    server, originals = matrix
    rows = measurements(30, seed=8)

    result = infer(protocol, server, f"{library}-reg", {"input": rows})

    (output,) = result.get_response()["outputs"] if protocol == "http" else result.get_response().outputs
    name = output["name"] if protocol == "http" else output.name
    np.testing.assert_allclose(
        result.as_numpy(name).ravel(), originals[f"{library}-reg"].predict(rows), rtol=1e-4, atol=1e-4
    )


@pytest.mark.model_matrix
@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("library", LIBRARIES)
def test_pipeline_answers_as_the_notebook_with_missing_numbers(
    matrix: tuple[ServerProcess, dict[str, Any]], library: str, protocol: str
) -> None:
    server, originals = matrix
    rows = applicants(30, seed=9)
    assert rows["income"].isna().any()

    result = infer(protocol, server, f"{library}-pipe", frame_tensors(rows))

    assert_answers_as(originals[f"{library}-pipe"], rows, result)
