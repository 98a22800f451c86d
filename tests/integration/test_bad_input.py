"""Bad requests over HTTP and gRPC: each gets its status code and a message naming the problem.

After every case the server must still be live and answer a good request on another model, as
Triton's ``L0_input_validation`` and ``L0_http_fuzz`` expect. Error text is for the caller: it never
shows the repository's filesystem path or a Python traceback.
"""

from __future__ import annotations

import http.client
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2, service_pb2_grpc

from tests.fixtures.onnx_models import (
    ONNX_TYPES,
    add_sub_grpc_inputs,
    add_sub_model,
    identity_model,
    write_repository,
)
from tests.integration.server_process import ServerProcess, requests_counted

IDENTITY_CONFIG = """
name: "identity"
max_batch_size: 2
"""
FOUR_FLOATS = np.array([[1.0, 2.0, 3.0, 4.0]], dtype=np.float32)


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """identity (FP32 [-1, 4], max_batch_size 2), simple (add/sub), and two models that fail to load."""
    root = write_repository(
        tmp_path_factory.mktemp("bad-input"),
        {
            "identity": (identity_model(ONNX_TYPES["FP32"]), IDENTITY_CONFIG),
            "simple": (add_sub_model(), None),
            "bad-config": (add_sub_model(), 'name: "bad-config"\nmax_batch_size: [ oops'),
        },
    )
    (root / "not-onnx" / "1").mkdir(parents=True)
    (root / "not-onnx" / "1" / "model.onnx").write_bytes(b"GIF89a: an image, not an ONNX model")
    return root


def post(
    server: ServerProcess, path: str, body: bytes, headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    """A raw HTTP POST, so the body and headers are exactly what the case says."""
    host, port = server.http_url.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request("POST", path, body=body, headers=headers or {})
        reply = connection.getresponse()
        return reply.status, reply.read()
    finally:
        connection.close()


def infer_body(*inputs: dict[str, Any], **extra: Any) -> bytes:
    return json.dumps({"inputs": list(inputs), **extra}).encode()


def fp32_input(
    name: str = "INPUT0", shape: list[int] | None = None, data: list[Any] | None = None
) -> dict[str, Any]:
    return {"name": name, "datatype": "FP32", "shape": shape or [1, 4], "data": data or [1.0, 2.0, 3.0, 4.0]}


def binary_request(json_part: dict[str, Any], blob: bytes) -> tuple[bytes, dict[str, str]]:
    """A body using the binary tensor extension: JSON, then raw tensor bytes."""
    header = json.dumps(json_part).encode()
    return header + blob, {"Inference-Header-Content-Length": str(len(header))}


def assert_still_serving(server: ServerProcess) -> None:
    """The server is live and a good request on another model is answered correctly."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        assert client.is_server_live()
        result = client.infer("simple", add_sub_grpc_inputs(value=3))
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full((1, 16), 6, dtype=np.float32))
    finally:
        client.close()
    status, _ = post(
        server,
        "/v2/models/simple/infer",
        infer_body(fp32_input(shape=[1, 16], data=[1.0] * 16), fp32_input("INPUT1", [1, 16], [1.0] * 16)),
    )
    assert status == 200


def assert_clean_message(message: str, repository: Path) -> None:
    assert str(repository) not in message
    assert str(repository.resolve()) not in message
    assert "Traceback" not in message


IDENTITY_INFER = "/v2/models/identity/infer"
GOOD_BODY = infer_body(fp32_input())


def nested(depth: int) -> list[Any]:
    """``[[[...[1.0]...]]]``: valid JSON up to orjson's 1024 levels, but more dims than numpy's 64."""
    value: list[Any] = [1.0]
    for _ in range(depth - 1):
        value = [value]
    return value


@dataclass
class HttpCase:
    """One bad HTTP request, the status it must get and a word its error must contain."""

    id: str
    body: bytes
    status: int
    needle: str
    path: str = IDENTITY_INFER
    headers: dict[str, str] = field(default_factory=dict)


def binary_case(id: str, binary_data_size: int, blob: bytes, needle: str) -> HttpCase:
    """INPUT0 FP32 [1, 4] declared with ``binary_data_size``, followed by ``blob``."""
    entry = {"name": "INPUT0", "datatype": "FP32", "shape": [1, 4]}
    entry["parameters"] = {"binary_data_size": binary_data_size}
    body, headers = binary_request({"inputs": [entry]}, blob)
    return HttpCase(id, body, 400, needle, headers=headers)


def header_length_case(id: str, value: str) -> HttpCase:
    headers = {"Inference-Header-Content-Length": value}
    return HttpCase(id, GOOD_BODY, 400, "Inference-Header-Content-Length", headers=headers)


HTTP_CASES = [
    HttpCase("unknown-model", GOOD_BODY, 404, "nope", path="/v2/models/nope/infer"),
    HttpCase("unknown-version", GOOD_BODY, 404, "version 9", path="/v2/models/identity/versions/9/infer"),
    HttpCase(
        "missing-input",
        infer_body(fp32_input(shape=[1, 16], data=[0.0] * 16)),
        400,
        "INPUT1",
        path="/v2/models/simple/infer",
    ),
    HttpCase("unknown-input", infer_body(fp32_input("WRONG")), 400, "WRONG"),
    HttpCase("unknown-output", infer_body(fp32_input(), outputs=[{"name": "NOPE"}]), 400, "NOPE"),
    HttpCase(
        "duplicate-output",
        infer_body(fp32_input(), outputs=[{"name": "OUTPUT0"}, {"name": "OUTPUT0"}]),
        400,
        "output 'OUTPUT0' already requested",
    ),
    HttpCase(
        "wrong-datatype",
        infer_body({**fp32_input(), "datatype": "INT32", "data": [1, 2, 3, 4]}),
        400,
        "INT32",
    ),
    HttpCase("unknown-datatype", infer_body({**fp32_input(), "datatype": "FP8"}), 400, "FP8"),
    HttpCase("wrong-shape", infer_body(fp32_input(shape=[1, 5], data=[1.0] * 5)), 400, "INPUT0"),
    HttpCase("negative-dim", infer_body(fp32_input(shape=[1, -4])), 400, "INPUT0"),
    HttpCase(
        "more-dims-than-numpy-allows", infer_body(fp32_input(shape=[1] * 100, data=[1.0])), 400, "INPUT0"
    ),
    HttpCase(
        "batch-above-max-batch-size",
        infer_body(fp32_input(shape=[3, 4], data=[1.0] * 12)),
        400,
        "max_batch_size",
    ),
    HttpCase("json-data-shorter-than-shape", infer_body(fp32_input(data=[1.0, 2.0, 3.0])), 400, "INPUT0"),
    HttpCase("json-data-not-numbers", infer_body(fp32_input(data=["a", "b", "c", "d"])), 400, "INPUT0"),
    HttpCase(
        "json-data-too-large-for-fp32",
        infer_body(fp32_input(data=[1.0, 1e39, 3.0, 4.0])),
        400,
        "too large for datatype FP32",
    ),
    HttpCase(
        "json-data-nested-past-numpy",
        infer_body(fp32_input(data=nested(500))),
        400,
        "INPUT0",
    ),
    binary_case("binary-data-shorter-than-shape", 12, FOUR_FLOATS.tobytes()[:12], "INPUT0"),
    # Longer than its shape, the body agreeing with binary_data_size: refused, never cut to the shape.
    binary_case("binary-data-longer-than-shape", 20, FOUR_FLOATS.tobytes() + bytes(4), "input 'INPUT0'"),
    binary_case("binary-data-size-past-the-body", 16, FOUR_FLOATS.tobytes()[:8], "binary_data_size"),
    binary_case(
        "binary-data-size-short-of-the-body", 16, FOUR_FLOATS.tobytes() + bytes(4), "binary_data_size"
    ),
    HttpCase("malformed-json", b'{"inputs": [{"name": "INPUT0",', 400, "JSON"),
    HttpCase("json-not-an-object", b"[1, 2, 3]", 400, "JSON object"),
    HttpCase("json-not-utf8", b'{"inputs": "\xff\xfe"}', 400, "JSON"),
    HttpCase("json-nested-too-deep", b"[" * 100_000, 400, "JSON"),
    HttpCase("no-inputs", b'{"id": "x"}', 400, "inputs"),
    header_length_case("header-length-beyond-body", str(len(GOOD_BODY) + 100)),
    header_length_case("header-length-not-an-integer", "twelve"),
    header_length_case("header-length-negative", "-1"),
    HttpCase("gzip-garbage", b"this is not gzip data", 400, "gzip", headers={"Content-Encoding": "gzip"}),
    HttpCase("unknown-content-encoding", GOOD_BODY, 400, "br", headers={"Content-Encoding": "br"}),
    HttpCase("unparsable-config-model", GOOD_BODY, 503, "bad-config", path="/v2/models/bad-config/infer"),
    HttpCase("non-onnx-model", GOOD_BODY, 503, "not-onnx", path="/v2/models/not-onnx/infer"),
]


@pytest.mark.parametrize("case", HTTP_CASES, ids=[c.id for c in HTTP_CASES])
def test_http_bad_request(server: ServerProcess, repository: Path, case: HttpCase) -> None:
    status, body = post(server, case.path, case.body, case.headers)

    assert status == case.status, body
    assert case.needle in json.loads(body)["error"]
    assert_clean_message(body.decode(), repository)
    assert_still_serving(server)


def grpc_request(model: str = "identity", version: str = "", **tensor: Any) -> service_pb2.ModelInferRequest:
    """A ``ModelInferRequest`` with one input (INPUT0 FP32 [1, 4] unless overridden) in raw_input_contents."""
    spec: dict[str, Any] = {
        "name": "INPUT0",
        "datatype": "FP32",
        "shape": [1, 4],
        "raw": FOUR_FLOATS.tobytes(),
    }
    spec.update(tensor)
    request = service_pb2.ModelInferRequest(model_name=model, model_version=version)
    request.inputs.add(name=spec["name"], datatype=spec["datatype"], shape=spec["shape"])
    request.raw_input_contents.append(spec["raw"])
    return request


def with_extra_raw_entry() -> service_pb2.ModelInferRequest:
    request = grpc_request()
    request.raw_input_contents.append(bytes(16))
    return request


def with_raw_and_typed_contents() -> service_pb2.ModelInferRequest:
    request = grpc_request()
    request.inputs[0].contents.fp32_contents.extend([1.0, 2.0, 3.0, 4.0])
    return request


def with_unknown_output() -> service_pb2.ModelInferRequest:
    request = grpc_request()
    request.outputs.add(name="NOPE")
    return request


def with_duplicate_output() -> service_pb2.ModelInferRequest:
    request = grpc_request()
    request.outputs.add(name="OUTPUT0")
    request.outputs.add(name="OUTPUT0")
    return request


@dataclass
class GrpcCase:
    """One bad ``ModelInfer`` request, the status code it must get and a word its message must contain."""

    id: str
    request: service_pb2.ModelInferRequest
    code: grpc.StatusCode
    needle: str


NOT_FOUND = grpc.StatusCode.NOT_FOUND
INVALID = grpc.StatusCode.INVALID_ARGUMENT
UNAVAILABLE = grpc.StatusCode.UNAVAILABLE
GRPC_CASES = [
    GrpcCase("unknown-model", grpc_request("nope"), NOT_FOUND, "nope"),
    GrpcCase("unknown-version", grpc_request(version="9"), NOT_FOUND, "version 9"),
    GrpcCase("missing-input", grpc_request("simple", shape=[1, 16], raw=bytes(64)), INVALID, "INPUT1"),
    GrpcCase("unknown-input", grpc_request(name="WRONG"), INVALID, "WRONG"),
    GrpcCase("unknown-output", with_unknown_output(), INVALID, "NOPE"),
    GrpcCase("duplicate-output", with_duplicate_output(), INVALID, "output 'OUTPUT0' already requested"),
    GrpcCase("wrong-datatype", grpc_request(datatype="INT32"), INVALID, "INT32"),
    GrpcCase("unknown-datatype", grpc_request(datatype="FP8"), INVALID, "FP8"),
    GrpcCase("wrong-shape", grpc_request(shape=[1, 5], raw=bytes(20)), INVALID, "INPUT0"),
    GrpcCase("more-dims-than-numpy-allows", grpc_request(shape=[1] * 100, raw=bytes(4)), INVALID, "INPUT0"),
    GrpcCase(
        "batch-above-max-batch-size", grpc_request(shape=[3, 4], raw=bytes(48)), INVALID, "max_batch_size"
    ),
    GrpcCase("raw-shorter-than-shape", grpc_request(raw=bytes(12)), INVALID, "INPUT0"),
    GrpcCase("raw-longer-than-shape", grpc_request(raw=bytes(20)), INVALID, "INPUT0"),
    GrpcCase("raw-entries-unlike-inputs", with_extra_raw_entry(), INVALID, "raw_input_contents"),
    GrpcCase("raw-and-typed-contents-mixed", with_raw_and_typed_contents(), INVALID, "INPUT0"),
    # A BYTES element whose 4-byte length prefix (255) runs past the 2 bytes that follow it.
    GrpcCase(
        "bytes-length-past-the-data", grpc_request(datatype="BYTES", raw=b"\xff\0\0\0ab"), INVALID, "INPUT0"
    ),
    GrpcCase("unparsable-config-model", grpc_request("bad-config"), UNAVAILABLE, "bad-config"),
    GrpcCase("non-onnx-model", grpc_request("not-onnx"), UNAVAILABLE, "not-onnx"),
]


@pytest.mark.parametrize("case", GRPC_CASES, ids=[c.id for c in GRPC_CASES])
def test_grpc_bad_request(
    server: ServerProcess,
    repository: Path,
    grpc_stub: service_pb2_grpc.GRPCInferenceServiceStub,
    case: GrpcCase,
) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        grpc_stub.ModelInfer(case.request)

    assert caught.value.code() == case.code
    assert case.needle in caught.value.details()
    assert_clean_message(caught.value.details(), repository)
    assert_still_serving(server)


@pytest.mark.parametrize(
    "payload",
    [b"\xff\xff\xff\xff", b"\x0a\x80\x80\x80\x80\x10", b"\x32\x05ab"],
    ids=["invalid-tag", "length-past-the-end", "truncated-input"],
)
def test_grpc_bytes_that_are_not_a_model_infer_request_are_refused(
    server: ServerProcess, repository: Path, payload: bytes
) -> None:
    before = requests_counted(server, "grpc", "INVALID_ARGUMENT")
    with grpc.insecure_channel(server.grpc_url) as channel, pytest.raises(grpc.RpcError) as caught:
        channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")(payload, timeout=10)

    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "inference.ModelInferRequest" in caught.value.details()
    assert_clean_message(caught.value.details(), repository)
    assert requests_counted(server, "grpc", "INVALID_ARGUMENT") == before + 1
    assert_still_serving(server)


def test_failed_models_say_why_without_the_repository_path(server: ServerProcess, repository: Path) -> None:
    status, body = post(server, "/v2/repository/index", b"{}")
    assert status == 200
    reasons = {entry["name"]: entry.get("reason", "") for entry in json.loads(body)}
    assert "does not parse" in reasons["bad-config"]
    assert "not a loadable ONNX model" in reasons["not-onnx"]
    assert reasons["identity"] == reasons["simple"] == ""
    assert_clean_message(body.decode(), repository)


def test_server_is_live_but_not_ready_with_failed_models(server: ServerProcess) -> None:
    # Strict readiness (the default, as in Triton): a model that failed to load makes the server not ready.
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        assert client.is_server_live()
        assert not client.is_server_ready()
        assert client.is_model_ready("identity")
    finally:
        client.close()
