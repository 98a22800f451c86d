"""Data contracts end to end: a notebook pipeline exported with its contract, served by a real
``conch serve``, and held to it over HTTP and gRPC with tritonclient; lineage parameters and headers,
the ``filled`` answer parameter, the inference log and the metrics.

One server serves the module: the exported pipeline (``fraud``), a copy whose contract was edited by
hand (``fraud_strict``), one whose contract is malformed (``broken``), and a Python model that echoes
the parameters it is given (``echo``).
"""

from __future__ import annotations

import json
import math
import queue
import shutil
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import yaml
from google.protobuf import text_format
from prometheus_client.parser import text_string_to_metric_families
from sklearn.compose import ColumnTransformer
from sklearn.impute import SimpleImputer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler
from tritonclient.grpc import model_config_pb2 as mc
from tritonclient.utils import InferenceServerException

from conch.exporting import export
from conch.packaging.install import install_package
from conch.packaging.package import package_model
from conch.packaging.semver import parse_semver
from conch.validation import validate_path
from tests.fixtures.data_contracts import AMOUNT_CONTRACT
from tests.fixtures.python_models import write_python_model
from tests.integration.server_process import ServerProcess

COLUMNS = ("amount", "age", "region", "plan")


def training_frame(rows: int = 240) -> tuple[pd.DataFrame, np.ndarray]:
    rng = np.random.default_rng(5)
    frame = pd.DataFrame(
        {
            "amount": rng.gamma(2.0, 50.0, rows),
            "age": rng.integers(18, 90, rows).astype(float),
            "region": rng.choice(["north", "south", "east"], rows),
            "plan": rng.choice(["basic", "plus"], rows),
        }
    )
    frame.loc[::9, "amount"] = np.nan
    labels = ((frame["amount"].fillna(0) > 100) ^ (frame["plan"] == "plus")).to_numpy().astype(int)
    return frame, labels


def pipeline(frame: pd.DataFrame, labels: np.ndarray) -> Pipeline:
    """``amount`` imputed, ``age`` not, ``region`` ignores unknown categories, ``plan`` refuses them."""
    features = ColumnTransformer(
        [
            ("amount", make_pipeline(SimpleImputer(), StandardScaler()), ["amount"]),
            ("age", StandardScaler(), ["age"]),
            ("region", OneHotEncoder(handle_unknown="ignore"), ["region"]),
            ("plan", OneHotEncoder(handle_unknown="error"), ["plan"]),
        ]
    )
    return make_pipeline(features, LogisticRegression()).fit(frame, labels)


ECHO_CONFIG = """
name: "echo"
backend: "python"
max_batch_size: 8
input [ { name: "amount" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "PARAMETERS" data_type: TYPE_STRING dims: [ 1 ] } ]
"""
ECHO_CODE = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            amount = pb_utils.get_input_tensor_by_name(request, "amount").as_numpy()
            text = request.parameters() + "|" + repr(float(amount[0, 0]))
            value = np.array([[text.encode()]] * amount.shape[0], dtype=object)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("PARAMETERS", value)]))
        return responses
"""
#: The same echo, decoupled: two responses per request through the response sender.
ECHO_STREAM_CODE = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            amount = pb_utils.get_input_tensor_by_name(request, "amount").as_numpy()
            sender = request.get_response_sender()
            for part in ("first", "last"):
                value = np.array([[(part + "|" + repr(float(amount[0, 0]))).encode()]], dtype=object)
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("PARAMETERS", value)]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""


@pytest.fixture(scope="module")
def trained() -> tuple[pd.DataFrame, Pipeline]:
    frame, labels = training_frame()
    return frame, pipeline(frame, labels)


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory, trained: tuple[pd.DataFrame, Pipeline]) -> Path:
    frame, model = trained
    root = tmp_path_factory.mktemp("contracts")
    export(model, frame.head(20), repository=root, name="fraud", reference=frame)
    shutil.copytree(root / "fraud", root / "fraud_strict")
    metadata = root / "fraud_strict" / "1" / "metadata.json"
    metadata.write_text(metadata.read_text().replace('"name": "fraud"', '"name": "fraud_strict"'))
    strict = root / "fraud_strict" / "1" / "contract.yaml"
    document = yaml.safe_load(strict.read_text())
    document["conch"]["ingestion_timestamp"] = {"required": True}
    document["fields"][0]["conch"]["out_of_range"] = "refuse"
    strict.write_text(yaml.safe_dump(document))
    (root / "fraud_strict" / "config.pbtxt").write_text(
        (root / "fraud" / "config.pbtxt").read_text().replace('name: "fraud"', 'name: "fraud_strict"')
    )
    # Version 2: the same model under the exported contract, served beside version 1.
    shutil.copytree(root / "fraud" / "1", root / "fraud_strict" / "2")
    second = json.loads((root / "fraud_strict" / "2" / "metadata.json").read_text())
    second.update(name="fraud_strict", version=2)
    (root / "fraud_strict" / "2" / "metadata.json").write_text(json.dumps(second))
    config = text_format.Parse((root / "fraud_strict" / "config.pbtxt").read_text(), mc.ModelConfig())
    config.version_policy.all.SetInParent()
    (root / "fraud_strict" / "config.pbtxt").write_text(text_format.MessageToString(config))
    shutil.copytree(root / "fraud_strict", root / "broken")
    shutil.rmtree(root / "broken" / "2")
    (root / "broken" / "config.pbtxt").write_text(
        (root / "fraud" / "config.pbtxt").read_text().replace('name: "fraud"', 'name: "broken"')
    )
    broken = root / "broken" / "1" / "contract.yaml"
    broken.write_text(broken.read_text().replace("missing: impute", "missing: sometimes"))
    write_python_model(root, "echo", ECHO_CONFIG, ECHO_CODE)
    (root / "echo" / "1" / "contract.yaml").write_text(yaml.safe_dump(AMOUNT_CONTRACT))
    stream_config = (
        ECHO_CONFIG.replace('"echo"', '"echo_stream"') + "model_transaction_policy { decoupled: true }\n"
    )
    write_python_model(root, "echo_stream", stream_config, ECHO_STREAM_CODE)
    (root / "echo_stream" / "1" / "contract.yaml").write_text(yaml.safe_dump(AMOUNT_CONTRACT))
    return root


@pytest.fixture(scope="module")
def server(start_server: Callable[..., ServerProcess], repository: Path) -> ServerProcess:
    return start_server(
        repository, "--log-format", "json", "--log-inferences", "true", "--strict-readiness", "false"
    )


def row_inputs(rows: list[dict[str, Any]], client: Any) -> list[Any]:
    """One ``[n, 1]`` input per column present in every row (the columns a stream record has)."""
    inputs = []
    for name in COLUMNS:
        if not all(name in row for row in rows):
            continue
        text = name in ("region", "plan")
        values = np.array([[row[name]] for row in rows], dtype=object if text else np.float32)
        tensor = client.InferInput(name, list(values.shape), "BYTES" if text else "FP32")
        tensor.set_data_from_numpy(values)
        inputs.append(tensor)
    return inputs


def metric(server: ServerProcess, name: str, **labels: str) -> float:
    with urllib.request.urlopen(server.metrics_url, timeout=10) as reply:
        text = reply.read().decode()
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def test_export_writes_the_contract_the_pipeline_implies(repository: Path) -> None:
    document = yaml.safe_load((repository / "fraud" / "1" / "contract.yaml").read_text())
    fields = {entry["name"]: entry for entry in document["fields"]}
    assert fields["amount"]["conch"]["missing"] == "impute"
    assert fields["age"]["conch"]["missing"] == "default" and 18 <= fields["age"]["conch"]["default"] <= 90
    assert fields["age"]["constraints"]["minimum"] == 18.0 and fields["age"]["constraints"]["maximum"] <= 89.0
    assert fields["region"]["constraints"]["enum"] == ["east", "north", "south"]
    assert fields["region"]["conch"]["unknown_category"] == "count"
    assert fields["plan"]["conch"]["unknown_category"] == "refuse"
    assert document["conch"]["range"] == "reference"
    metadata = json.loads((repository / "fraud" / "1" / "metadata.json").read_text())
    assert "contract.yaml" in metadata["files"]  # packaged and checked like the model file
    codes = {f.code: f for f in validate_path(repository / "fraud_strict")}
    assert codes["metadata-contract-changed"].severity.value == "warning"  # edited by hand
    assert "metadata-checksum-mismatch" not in codes


def test_a_package_carries_the_edited_contract_under_its_checksum(repository: Path, tmp_path: Path) -> None:
    package = package_model(
        repository / "fraud_strict", parse_semver("1.0.0"), tmp_path / "strict.tar.gz", model_version=1
    )
    installed = install_package(package, tmp_path / "installed")
    edited = (repository / "fraud_strict" / "1" / "contract.yaml").read_text()
    assert (installed.version_dir / "contract.yaml").read_text() == edited
    codes = {f.code for f in validate_path(installed.version_dir.parent)}
    assert "metadata-contract-changed" not in codes  # the package recorded the edited file's checksum


def test_a_full_row_is_answered_as_the_notebook_answers_it(
    server: ServerProcess, trained: tuple[pd.DataFrame, Pipeline]
) -> None:
    frame, model = trained
    rows = frame.iloc[1:4].to_dict("records")
    with httpclient.InferenceServerClient(server.http_url) as client:
        result = client.infer("fraud", row_inputs(rows, httpclient))
    assert result.as_numpy("label").ravel().tolist() == model.predict(frame.iloc[1:4]).tolist()
    assert "filled" not in (result.get_response().get("parameters") or {})


def test_absent_and_missing_values_are_imputed_or_take_their_default_and_the_answer_says_which(
    server: ServerProcess, trained: tuple[pd.DataFrame, Pipeline]
) -> None:
    _, model = trained
    document = yaml.safe_load(Path(server.repository or "", "fraud/1/contract.yaml").read_text())
    defaults = {entry["name"]: entry["conch"].get("default") for entry in document["fields"]}
    with httpclient.InferenceServerClient(server.http_url) as client:
        one = client.infer("fraud", row_inputs([{"amount": 120.0, "plan": "basic"}], httpclient))
        rows = [
            {"amount": math.nan, "age": 30.0, "plan": "plus"},
            {"amount": 80.0, "age": math.nan, "plan": "basic"},
        ]
        several = client.infer("fraud", row_inputs(rows, httpclient))
    assert one.get_response()["parameters"]["filled"] == "age,region"
    expected = pd.DataFrame(
        [{"amount": 120.0, "age": defaults["age"], "region": defaults["region"], "plan": "basic"}]
    )
    assert one.as_numpy("label").ravel().tolist() == model.predict(expected).tolist()
    assert json.loads(several.get_response()["parameters"]["filled"]) == [["region"], ["age", "region"]]
    notebook = pd.DataFrame(rows).assign(region=defaults["region"])
    notebook.loc[1, "age"] = defaults["age"]  # amount stays NaN: the pipeline's imputer treats it
    assert several.as_numpy("label").ravel().tolist() == model.predict(notebook[list(COLUMNS)]).tolist()
    assert metric(server, "conch_contract_filled_total", model="fraud", field="age") >= 2


def test_grpc_refuses_a_wrong_type_and_a_category_the_pipeline_refuses_and_counts_the_rest(
    server: ServerProcess,
) -> None:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        wrong = grpcclient.InferInput("age", [1, 1], "BYTES")
        wrong.set_data_from_numpy(np.array([[b"old"]], dtype=object))
        plan = row_inputs([{"plan": "basic"}], grpcclient)
        with pytest.raises(InferenceServerException) as caught:
            client.infer("fraud", [wrong, *plan])
        assert caught.value.status() == "StatusCode.INVALID_ARGUMENT"
        assert "input 'age' of model 'fraud' breaks its data contract, rule 'type'" in caught.value.message()
        with pytest.raises(InferenceServerException, match="rule 'category': 'gold' is not a category"):
            client.infer("fraud", row_inputs([{"age": 40.0, "plan": "gold"}], grpcclient))
        served = client.infer(
            "fraud", row_inputs([{"age": 400.0, "region": "west", "plan": "plus"}], grpcclient)
        )
    assert served.as_numpy("label").shape == (1,) or served.as_numpy("label").shape == (1, 1)
    assert metric(server, "conch_contract_violations_total", model="fraud", field="age", rule="type") == 1
    assert (
        metric(server, "conch_contract_violations_total", model="fraud", field="plan", rule="category") == 1
    )
    assert metric(server, "conch_contract_unknown_category_total", model="fraud", field="region") == 1
    assert metric(server, "conch_contract_out_of_range_total", model="fraud", version="1", field="age") == 1


def test_lineage_comes_as_headers_or_parameters_and_is_logged_and_measured(server: ServerProcess) -> None:
    body = json.dumps(
        {
            "inputs": [{"name": "plan", "shape": [1, 1], "datatype": "BYTES", "data": ["basic"]}],
            "parameters": {"data_version": "batch-7"},
        }
    ).encode()
    headers = {"content-type": "application/json", "x-request-id": "lineage-1"}
    stamp = time.time() - 2.0
    reply = server.request(
        "POST", "/v2/models/fraud/infer", body, {**headers, "conch-ingestion-timestamp": str(stamp)}
    )
    assert reply.status == 200, reply.body
    future = {**headers, "conch-ingestion-timestamp": "2999-01-01T00:00:00Z", "x-request-id": "lineage-2"}
    assert server.request("POST", "/v2/models/fraud/infer", body, future).status == 200
    malformed = server.request(
        "POST",
        "/v2/models/fraud/infer",
        body,
        {**headers, "conch-ingestion-timestamp": "yesterday", "x-request-id": "lineage-3"},
    )
    assert malformed.status == 400 and "RFC 3339" in malformed.json()["error"]
    assert metric(server, "conch_ingestion_timestamp_future_total", model="fraud") == 1
    assert metric(server, "conch_data_freshness_seconds_count", model="fraud") == 2
    assert metric(server, "conch_data_freshness_seconds_sum", model="fraud") >= 2.0
    records = {}
    deadline = time.monotonic() + 10
    while len(records) < 2 and time.monotonic() < deadline:
        for line in server.log().splitlines():
            if '"event": "inference"' in line or '"event":"inference"' in line:
                record = json.loads(line)
                records[record["request_id"]] = record
        time.sleep(0.2)
    assert records["lineage-1"]["data_version"] == "batch-7"
    assert float(records["lineage-1"]["ingestion_timestamp"]) == pytest.approx(stamp)
    assert records["lineage-1"]["filled"] == "age,region"


def test_an_edited_contract_requires_lineage_and_refuses_out_of_range_values(server: ServerProcess) -> None:
    with httpclient.InferenceServerClient(server.http_url) as client:
        row = row_inputs([{"amount": 50.0, "plan": "basic"}], httpclient)
        with pytest.raises(
            InferenceServerException, match=r"parameter 'ingestion_timestamp' .* rule 'required'"
        ):
            client.infer("fraud_strict", row, model_version="1")
        # Each version is held to its own contract: version 2 kept the exported one.
        assert client.infer("fraud_strict", row, model_version="2").get_response()["model_version"] == "2"
        client.infer("fraud_strict", row, model_version="1", parameters={"ingestion_timestamp": time.time()})
        with pytest.raises(InferenceServerException, match=r"input 'amount' .* rule 'range'"):
            client.infer(
                "fraud_strict",
                row_inputs([{"amount": 1e6, "plan": "basic"}], httpclient),
                model_version="1",
                parameters={"ingestion_timestamp": "2026-01-31T12:00:00Z"},
            )
        index = {entry["name"]: entry for entry in client.get_model_repository_index()}
    assert index["broken"].get("state") != "READY"
    reason = server.request("POST", "/v2/repository/index", b"{}").json()
    why = " ".join(str(entry.get("reason", "")) for entry in reason if entry["name"] == "broken")
    assert "contract.yaml: field 'amount': conch.missing must be one of" in why


def test_a_python_model_gets_the_lineage_parameters_and_its_contracts_default(server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        with pytest.raises(InferenceServerException, match=r"parameter 'data_version' .* rule 'required'"):
            client.infer("echo", [], outputs=None)
        result = client.infer(
            "echo", [], parameters={"data_version": "v3", "ingestion_timestamp": "1769860800"}
        )
    text = result.as_numpy("PARAMETERS").ravel()[0].decode()
    parameters, amount = text.split("|")
    assert json.loads(parameters) == {"data_version": "v3", "ingestion_timestamp": "1769860800"}
    assert float(amount) == 5.0
    assert result.get_response().parameters["filled"].string_param == "amount"


def test_a_decoupled_models_responses_say_what_was_filled_and_its_freshness_is_counted_once(
    server: ServerProcess,
) -> None:
    answers: queue.Queue[Any] = queue.Queue()
    fresh = "conch_data_freshness_seconds_count"
    before = metric(server, fresh, model="echo_stream")
    stamp = str(time.time() - 3.0)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        client.async_stream_infer(
            "echo_stream", [], parameters={"data_version": "v9", "ingestion_timestamp": stamp}
        )
        client.async_stream_infer("echo_stream", [])  # no data_version: refused by the contract
        got = [answers.get(timeout=30) for _ in range(3)]
        client.stop_stream()

    errors = [error for _, error in got if error is not None]
    results = [result for result, error in got if error is None]
    assert len(errors) == 1 and "data_version" in str(errors[0])
    texts = [result.as_numpy("PARAMETERS").ravel()[0].decode() for result in results]
    assert texts == ["first|5.0", "last|5.0"]
    assert [result.get_response().parameters["filled"].string_param for result in results] == ["amount"] * 2
    assert metric(server, fresh, model="echo_stream") == before + 1
    assert metric(server, "conch_data_freshness_seconds_sum", model="echo_stream") >= 3.0
