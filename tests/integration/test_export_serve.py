"""Export, then serve: notebook models through ``conch.export``, a real ``conch serve`` and tritonclient.

The promise of issue 4: a fitted pipeline or module goes to predictions from a running server with no
hand-written config. Each answer is compared with the original model's own output on the same rows,
missing values included, over HTTP (binary tensors) and gRPC.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from conch.exporting import export
from conch.packaging.metadata import read_metadata
from tests.fixtures.notebook_models import (
    churn_classifier,
    customers,
    dropout_mlp,
    forest_classifier,
    images,
    measurements,
    small_cnn,
    spend_regressor,
)
from tests.integration.server_process import ServerProcess

pytestmark = pytest.mark.torch  # the program this file drives

CLIENTS = {"http": httpclient, "grpc": grpcclient}


@pytest.fixture(scope="module")
def originals() -> dict[str, Any]:
    """The notebook objects, kept to compare the server's answers with."""
    return {
        "churn": churn_classifier(),
        "spend": spend_regressor(),
        "mlp": dropout_mlp(),
        "forest": forest_classifier(),
        "cnn": small_cnn(),
    }


@pytest.fixture(scope="module")
def server(
    start_server: Callable[..., ServerProcess],
    tmp_path_factory: pytest.TempPathFactory,
    originals: dict[str, Any],
) -> ServerProcess:
    repository = tmp_path_factory.mktemp("exported")
    export(originals["churn"], customers(20), repository=repository, name="churn")
    export(originals["spend"], customers(20, seed=2), repository=repository, name="spend", max_batch_size=8)
    export(originals["mlp"], measurements(10), repository=repository, name="mlp")
    export(originals["forest"], measurements(10), repository=repository, name="forest")
    export(originals["cnn"], images(4), repository=repository, name="cnn")
    return start_server(repository)


def client_for(protocol: str, server: ServerProcess) -> Any:
    module = CLIENTS[protocol]
    return module.InferenceServerClient(server.http_url if protocol == "http" else server.grpc_url)


def frame_inputs(protocol: str, frame: pd.DataFrame) -> list[Any]:
    """One [N, 1] tensor per column, sent as binary data; missing values stay NaN."""
    module = CLIENTS[protocol]
    inputs = []
    for column in frame.columns:
        values = frame[column]
        if values.dtype.kind == "f":
            array, datatype = values.to_numpy(np.float32).reshape(-1, 1), "FP32"
        elif values.dtype.kind == "i":
            array, datatype = values.to_numpy(np.int64).reshape(-1, 1), "INT64"
        else:
            array = np.array([v.encode() for v in values], dtype=object).reshape(-1, 1)
            datatype = "BYTES"
        tensor = module.InferInput(column, list(array.shape), datatype)
        if protocol == "http":
            tensor.set_data_from_numpy(array, binary_data=True)
        else:
            tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs


def outputs(protocol: str, names: list[str]) -> list[Any]:
    module = CLIENTS[protocol]
    if protocol == "http":
        return [module.InferRequestedOutput(name, binary_data=True) for name in names]
    return [module.InferRequestedOutput(name) for name in names]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_classifier_answers_as_the_pipeline_with_missing_values(
    server: ServerProcess, originals: dict[str, Any], protocol: str
) -> None:
    rows = customers(12, seed=11)
    assert rows["age"].isna().any() and rows["income"].isna().any()

    result = client_for(protocol, server).infer(
        "churn", frame_inputs(protocol, rows), outputs=outputs(protocol, ["label", "probabilities"])
    )

    labels = [value.decode() for value in result.as_numpy("label").ravel()]
    assert labels == originals["churn"].predict(rows).tolist()
    np.testing.assert_allclose(
        result.as_numpy("probabilities"), originals["churn"].predict_proba(rows), atol=1e-5
    )


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_regressor_answers_as_the_pipeline(
    server: ServerProcess, originals: dict[str, Any], protocol: str
) -> None:
    rows = customers(6, seed=12)

    result = client_for(protocol, server).infer("spend", frame_inputs(protocol, rows))

    np.testing.assert_allclose(
        result.as_numpy("variable").ravel(), originals["spend"].predict(rows), rtol=1e-4
    )


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_torch_module_answers_as_in_eval_mode(
    server: ServerProcess, originals: dict[str, Any], protocol: str
) -> None:
    rows = measurements(5, seed=13).astype(np.float32)
    tensor = CLIENTS[protocol].InferInput("input", list(rows.shape), "FP32")
    tensor.set_data_from_numpy(rows)

    first = client_for(protocol, server).infer("mlp", [tensor]).as_numpy("output")
    second = client_for(protocol, server).infer("mlp", [tensor]).as_numpy("output")

    mlp = originals["mlp"]
    assert mlp.training, "exporting must leave the notebook's module in training mode"
    mlp.eval()
    with torch.no_grad():
        expected = mlp(torch.from_numpy(rows)).numpy()
    mlp.train()
    np.testing.assert_array_equal(first, second)
    np.testing.assert_allclose(first, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_plain_estimator_answers_as_itself(
    server: ServerProcess, originals: dict[str, Any], protocol: str
) -> None:
    rows = measurements(7, seed=14)
    tensor = CLIENTS[protocol].InferInput("input", list(rows.shape), "FP32")
    tensor.set_data_from_numpy(rows.astype(np.float32))

    result = client_for(protocol, server).infer("forest", [tensor])

    forest = originals["forest"]
    assert result.as_numpy("label").ravel().tolist() == forest.predict(rows).tolist()
    np.testing.assert_allclose(result.as_numpy("probabilities"), forest.predict_proba(rows), atol=1e-5)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_cnn_answers_as_in_eval_mode(server: ServerProcess, originals: dict[str, Any], protocol: str) -> None:
    rows = images(3, seed=15)
    tensor = CLIENTS[protocol].InferInput("input", list(rows.shape), "FP32")
    tensor.set_data_from_numpy(rows)

    served = client_for(protocol, server).infer("cnn", [tensor]).as_numpy("output")

    cnn = originals["cnn"]
    cnn.eval()
    with torch.no_grad():
        expected = cnn(torch.from_numpy(rows)).numpy()
    cnn.train()
    np.testing.assert_allclose(served, expected, rtol=1e-4, atol=1e-5)


def test_served_metadata_matches_the_exported_schema(server: ServerProcess) -> None:
    repository = server.repository
    assert repository is not None
    exported = read_metadata(Path(repository) / "churn" / "1")

    served = client_for("http", server).get_model_metadata("churn")

    assert [(t["name"], t["datatype"], t["shape"]) for t in served["inputs"]] == [
        (t.name, t.datatype, t.shape) for t in exported.inputs
    ]
    assert [(t["name"], t["datatype"], t["shape"]) for t in served["outputs"]] == [
        (t.name, t.datatype, t.shape) for t in exported.outputs
    ]
    assert client_for("http", server).get_model_config("churn")["dynamic_batching"] is not None
