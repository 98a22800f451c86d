"""The classification extension over tritonclient HTTP and gRPC, against a real conch serve.

``InferRequestedOutput(name, class_count=K)`` turns an output into its top-K classes, ``"score:index"``
or ``"score:index:label"`` (labels from the output's ``label_filename``), checked here against numpy's
ranking of the values the model computes. Reserved parameters conch cannot honour are refused with a
400, while a client's own parameters still reach the model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from tests.fixtures.onnx_models import identity_model, write_repository
from tests.integration.server_process import ServerProcess

LABELS = ["cat", "dog", "owl", "fox"]


def config(name: str, datatype: str, batching: bool, labels: bool) -> str:
    label = ' label_filename: "labels.txt"' if labels else ""
    return f"""
name: "{name}"
max_batch_size: {8 if batching else 0}
input [ {{ name: "INPUT0" data_type: TYPE_{datatype} dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_{datatype} dims: [ 4 ]{label} }} ]
"""


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("models")
    fp32, int32, boolean = TensorProto.FLOAT, TensorProto.INT32, TensorProto.BOOL
    write_repository(
        root,
        {
            "labelled": (identity_model(fp32), config("labelled", "FP32", True, True)),
            "plain": (identity_model(fp32), config("plain", "FP32", True, False)),
            "single": (identity_model(fp32, batch=False), config("single", "FP32", False, True)),
            "votes": (identity_model(int32), config("votes", "INT32", True, False)),
            "flags": (identity_model(boolean), config("flags", "BOOL", True, False)),
        },
    )
    for name in ("labelled", "single"):
        (root / name / "labels.txt").write_text("\n".join(LABELS) + "\n")
    return root


def expected(values: np.ndarray, k: int, labels: list[str] | None) -> list[list[str]]:
    """numpy's ranking of each row, in Triton's text."""
    rows = []
    for row in values.reshape(-1, values.shape[-1]):
        order = np.argsort(-row.astype(np.float64), kind="stable")[:k]
        texts = [f"{row[i]:f}:{i}" if row.dtype.kind == "f" else f"{row[i]}:{i}" for i in order]
        rows.append([t + (f":{labels[i]}" if labels else "") for t, i in zip(texts, order, strict=True)])
    return rows


def classify(module: Any, client: Any, model: str, values: np.ndarray, k: int) -> np.ndarray:
    datatype = "INT32" if values.dtype == np.int32 else "BOOL" if values.dtype == bool else "FP32"
    tensor = module.InferInput("INPUT0", list(values.shape), datatype)
    tensor.set_data_from_numpy(values)
    result = client.infer(model, [tensor], outputs=[module.InferRequestedOutput("OUTPUT0", class_count=k)])
    return result.as_numpy("OUTPUT0")


PROTOCOLS = ["http", "grpc"]


@pytest.fixture(params=PROTOCOLS)
def protocol(request: pytest.FixtureRequest, http_client: Any, grpc_client: Any) -> tuple[Any, Any]:
    return (httpclient, http_client) if request.param == "http" else (grpcclient, grpc_client)


def text(answer: np.ndarray) -> list[Any]:
    return [[v.decode() for v in row] for row in answer] if answer.ndim == 2 else [v.decode() for v in answer]


@pytest.mark.parametrize(("model", "labels"), [("labelled", LABELS), ("plain", None)])
def test_a_batch_is_ranked_per_row_with_or_without_labels(
    protocol: tuple[Any, Any], model: str, labels: list[str] | None
) -> None:
    values = np.random.default_rng(3).random((3, 4)).astype(np.float32)

    answer = classify(*protocol, model, values, 2)

    assert answer.shape == (3, 2)
    assert text(answer) == expected(values, 2, labels)


def test_a_model_without_batching_answers_k_classes(protocol: tuple[Any, Any]) -> None:
    values = np.array([0.1, 0.9, 0.4, 0.3], dtype=np.float32)

    answer = classify(*protocol, "single", values, 3)

    assert answer.shape == (3,)
    assert text(answer) == expected(values, 3, LABELS)[0]


def test_integer_scores_and_k_above_the_classes(protocol: tuple[Any, Any]) -> None:
    values = np.array([[5, 1, 7, 2]], dtype=np.int32)

    assert text(classify(*protocol, "votes", values, 9)) == [["7:2", "5:0", "2:3", "1:1"]]


def test_the_other_outputs_keep_their_values(http_client: httpclient.InferenceServerClient) -> None:
    values = np.ones((1, 4), dtype=np.float32)
    tensor = httpclient.InferInput("INPUT0", [1, 4], "FP32")
    tensor.set_data_from_numpy(values)

    result = http_client.infer("plain", [tensor])

    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), values)


def test_a_bool_output_cannot_be_ranked(protocol: tuple[Any, Any]) -> None:
    with pytest.raises(InferenceServerException, match="class result not available for output 'OUTPUT0'"):
        classify(*protocol, "flags", np.ones((1, 4), dtype=bool), 1)


def post_infer(server: ServerProcess, model: str, document: dict[str, Any]) -> tuple[int, str]:
    reply = server.request("POST", f"/v2/models/{model}/infer", json.dumps(document).encode())
    return reply.status, reply.body.decode()


def infer_body(output_parameters: dict[str, Any] | None = None, **request_parameters: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]
    }
    if output_parameters is not None:
        document["outputs"] = [{"name": "OUTPUT0", "parameters": output_parameters}]
    if request_parameters:
        document["parameters"] = request_parameters
    return document


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (infer_body({"classification": 0}), "invalid value for 'classification' parameter"),
        (infer_body({"binary_data_size": 16}), "'binary_data_size' is a parameter of inputs"),
        (
            infer_body({"classification": 2, "shared_memory_region": "r", "shared_memory_byte_size": 8}),
            "Output can't set both 'shared_memory_region' and 'classification'",
        ),
        (infer_body(triton_magic=True), "parameter keys starting with 'triton_' are reserved"),
    ],
    ids=["class-count-zero", "binary-data-size-on-output", "classes-into-a-region", "triton-key"],
)
def test_http_refuses_reserved_parameters_it_cannot_honour(
    server: ServerProcess, body: dict[str, Any], needle: str
) -> None:
    status, message = post_infer(server, "plain", body)

    assert status == 400
    assert needle in message


def test_http_input_with_data_and_binary_data_size_is_refused_in_tritons_words(server: ServerProcess) -> None:
    body = infer_body()
    body["inputs"][0]["parameters"] = {"binary_data_size": 16}

    status, message = post_infer(server, "plain", body)

    assert status == 400
    assert message.startswith(
        "{\"error\":\"Input must set only one of the following fields: 'data', 'binary_data_size' in "
        "'parameters', 'shared_memory_region' in 'parameters'. But set 'data' 'binary_data_size'"
    )


@pytest.mark.parametrize("where", ["request", "input", "output"])
def test_grpc_refuses_the_http_binary_parameters(
    grpc_stub: service_pb2_grpc.GRPCInferenceServiceStub, where: str
) -> None:
    # tritonclient refuses these itself, so the raw service message is built here.
    request = service_pb2.ModelInferRequest(model_name="plain")
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 4])
    request.raw_input_contents.append(np.ones((1, 4), dtype=np.float32).tobytes())
    if where == "request":
        request.parameters["binary_data_output"].bool_param = True
    elif where == "input":
        request.inputs[0].parameters["binary_data_size"].int64_param = 16
    else:
        request.outputs.add(name="OUTPUT0").parameters["binary_data"].bool_param = True

    with pytest.raises(grpc.RpcError) as caught:
        grpc_stub.ModelInfer(request)

    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "is a parameter of the HTTP binary extension" in caught.value.details()


@pytest.mark.parametrize("protocol_name", PROTOCOLS)
def test_a_clients_own_parameters_pass(
    protocol_name: str, http_client: httpclient.InferenceServerClient, grpc_client: Any
) -> None:
    module, client = (httpclient, http_client) if protocol_name == "http" else (grpcclient, grpc_client)
    tensor = module.InferInput("INPUT0", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.full((1, 4), 2.0, dtype=np.float32))

    result = client.infer("plain", [tensor], parameters={"tenant": "acme", "retries": 2})

    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full((1, 4), 2.0, dtype=np.float32))
