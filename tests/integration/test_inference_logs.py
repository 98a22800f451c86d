"""``--log-inferences``: one JSON record per inference, over HTTP, gRPC and generate; the
``x-request-id`` echo; the audit sample (``--log-sample-bodies``) with ``--log-redact``; and the
access log and load/unload events through the same ``--log-format json`` formatter.

The reference hashes are written here from the rule in docs/observability.md (name, NUL, datatype,
NUL, shape, NUL, little-endian bytes; BYTES elements length-prefixed), not by calling conch's code.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import re
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from tests.fixtures.onnx_models import add_sub_model, string_model, write_repository
from tests.integration.server_process import free_port
from tests.integration.test_structured_logs import LoggedServer, json_records, start_logged_server

HEX32 = re.compile(r"^[0-9a-f]{32}$")
#: INPUT1's values: redacted, so they must never reach the audit file (7777.25 is exact in FP32).
SECRET_VALUE = 7777.25
SECRET_TEXT = "secret-token-xyz"
FIELDS = (
    "request_id",
    "trace_id",
    "protocol",
    "endpoint",
    "model",
    "model_version",
    "input_hash",
    "queue_ms",
    "compute_ms",
    "total_ms",
    "status",
    "output_summary",
)


def reference_hash(*inputs: tuple[str, str, tuple[int, ...], bytes]) -> str:
    """The spec's hash, from (name, datatype, shape, raw little-endian bytes) in request order."""
    digest = hashlib.sha256()
    for name, datatype, shape, raw in inputs:
        digest.update(name.encode() + b"\0" + datatype.encode() + b"\0")
        digest.update(",".join(str(d) for d in shape).encode() + b"\0")
        digest.update(raw)
    return digest.hexdigest()


def bytes_elements(*values: bytes) -> bytes:
    return b"".join(struct.pack("<I", len(v)) + v for v in values)


def fp32(values: list[float]) -> bytes:
    return struct.pack(f"<{len(values)}f", *values)


INPUT0 = [float(i) for i in range(1, 17)]  # no sum or difference with INPUT1 shows 7777.25
INPUT1 = [SECRET_VALUE] * 16
ADD_SUB_HASH = reference_hash(
    ("INPUT0", "FP32", (1, 16), fp32(INPUT0)), ("INPUT1", "FP32", (1, 16), fp32(INPUT1))
)


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_repository(
        tmp_path_factory.mktemp("inference_logs") / "models",
        {"add_sub": (add_sub_model(), None), "text": (string_model(), None)},
    )


@pytest.fixture(scope="module")
def audit_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("audit") / "audit.jsonl"


@pytest.fixture(scope="module")
def logged(
    repository: Path, audit_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LoggedServer]:
    """Every request logged, every body audited; INPUT1 and the text model's input and output (an
    identity model's output is its input) redacted, by variable."""
    server = start_logged_server(
        repository,
        tmp_path_factory.mktemp("logs"),
        *("--log-format", "json", "--log-inferences", "true", "--access-log", "true"),
        *("--log-sample-bodies", "1.0", "--audit-log", str(audit_path), "--audit-log-max-mb", "5"),
        *("--model-control-mode", "explicit", "--load-model", "*"),
        env={"CONCH_LOG_REDACT": "INPUT1, TEXT,TEXT_OUT"},
    )
    yield server
    server.stop()


@pytest.fixture(scope="module")
def plain(repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoggedServer]:
    """The defaults: no inference records, no audit."""
    server = start_logged_server(repository, tmp_path_factory.mktemp("plain"), "--log-format", "json")
    yield server
    server.stop()


def post(
    port: int, path: str, document: Any, headers: dict[str, str] | None = None
) -> tuple[int, Any, dict[str, str]]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("POST", path, body=json.dumps(document), headers=headers or {})
        reply = connection.getresponse()
        body = reply.read()
        return reply.status, json.loads(body) if body else None, {k.lower(): v for k, v in reply.getheaders()}
    finally:
        connection.close()


def add_sub_body(request_id: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": INPUT0},
            {"name": "INPUT1", "datatype": "FP32", "shape": [1, 16], "data": INPUT1},
        ]
    }
    if request_id is not None:
        body["id"] = request_id
    return body


def add_sub_message(request_id: str) -> pb.ModelInferRequest:
    """INPUT0 and INPUT1 as gRPC raw contents, the same values as :func:`add_sub_body`."""
    message = pb.ModelInferRequest(model_name="add_sub", id=request_id)
    for name in ("INPUT0", "INPUT1"):
        message.inputs.add(name=name, datatype="FP32", shape=[1, 16])
    message.raw_input_contents.extend([fp32(INPUT0), fp32(INPUT1)])
    return message


def records_where(server: LoggedServer, match: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
    """The log's records that ``match``, waiting a little for them to be written."""
    deadline = time.monotonic() + 10
    while True:
        found = [r for r in json_records(server.log_lines()) if match(r)]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def inference(server: LoggedServer, request_id: str) -> dict[str, Any]:
    (record,) = records_where(
        server, lambda r: r.get("event") == "inference" and r["request_id"] == request_id
    )
    return record


def audit_entry(path: Path, request_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 10
    while True:
        entries = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
        found = [e for e in entries if e.get("request_id") == request_id]
        if found or time.monotonic() > deadline:
            assert len(found) == 1, found
            return found[0]
        time.sleep(0.05)


def test_an_http_inference_has_one_record_with_every_field_and_the_spec_hash(logged: LoggedServer) -> None:
    status, body, headers = post(
        logged.http_port, "/v2/models/add_sub/infer", add_sub_body("v2-id"), {"x-request-id": "client-id-1"}
    )

    assert status == 200 and headers["x-request-id"] == "client-id-1"
    record = inference(logged, "client-id-1")
    assert all(field in record for field in FIELDS), record
    assert record["input_hash"] == ADD_SUB_HASH
    assert (record["protocol"], record["endpoint"], record["model"], record["model_version"]) == (
        "HTTP",
        "infer",
        "add_sub",
        "1",
    )
    assert (record["status"], record["trace_id"], record["level"], record["logger"]) == (
        200,
        None,
        "INFO",
        "conch.inference",
    )
    assert min(record["queue_ms"], record["compute_ms"]) >= 0
    assert record["queue_ms"] + record["compute_ms"] <= record["total_ms"] < 10_000
    sums = [a + b for a, b in zip(INPUT0, INPUT1, strict=True)]
    assert record["output_summary"] == {"output": "OUTPUT0", "class": 15, "score": sums[15]}
    assert body["outputs"][0]["data"] == sums
    assert str(SECRET_VALUE) not in json.dumps(record)


def test_request_id_is_the_header_else_the_v2_id_else_generated_and_is_echoed(logged: LoggedServer) -> None:
    _, _, by_v2 = post(logged.http_port, "/v2/models/add_sub/infer", add_sub_body("only-v2-id"))
    _, _, generated = post(logged.http_port, "/v2/models/add_sub/infer", add_sub_body())
    too_long = "x" * 129
    _, _, ignored = post(
        logged.http_port, "/v2/models/add_sub/infer", add_sub_body("v2-wins"), {"x-request-id": too_long}
    )

    assert by_v2["x-request-id"] == "only-v2-id"
    assert inference(logged, "only-v2-id")["input_hash"] == ADD_SUB_HASH
    assert HEX32.match(generated["x-request-id"])
    assert inference(logged, generated["x-request-id"])["status"] == 200
    assert ignored["x-request-id"] == "v2-wins"


def test_a_grpc_inference_is_recorded_with_the_same_hash_and_echoes_its_id(logged: LoggedServer) -> None:
    request = add_sub_message("grpc-v2-id")
    with grpc.insecure_channel(f"127.0.0.1:{logged.grpc_port}") as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        _, call = stub.ModelInfer.with_call(
            request, metadata=(("x-request-id", "grpc-client-id"),), timeout=30
        )
        _, by_v2 = stub.ModelInfer.with_call(request, timeout=30)

    assert dict(call.trailing_metadata())["x-request-id"] == "grpc-client-id"
    assert dict(by_v2.trailing_metadata())["x-request-id"] == "grpc-v2-id"
    record = inference(logged, "grpc-client-id")
    assert all(field in record for field in FIELDS), record
    assert (record["protocol"], record["endpoint"], record["status"]) == ("gRPC", "ModelInfer", "OK")
    assert record["input_hash"] == ADD_SUB_HASH
    assert record["output_summary"]["class"] == 15


def test_grpc_errors_and_stream_messages_are_recorded_with_their_code(logged: LoggedServer) -> None:
    with grpcclient.InferenceServerClient(f"127.0.0.1:{logged.grpc_port}") as client:
        tensor = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
        tensor.set_data_from_numpy(np.zeros((1, 16), dtype=np.float32))
        with pytest.raises(grpcclient.InferenceServerException):
            client.infer("no_such_model", [tensor], request_id="grpc-missing")
    message = add_sub_message("stream-message-1")
    with grpc.insecure_channel(f"127.0.0.1:{logged.grpc_port}") as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        replies = list(stub.ModelStreamInfer(iter([message]), timeout=30))

    assert inference(logged, "grpc-missing")["status"] == "NOT_FOUND"
    assert not replies[0].error_message
    streamed = inference(logged, "stream-message-1")
    assert (streamed["endpoint"], streamed["status"], streamed["responses"]) == ("ModelStreamInfer", "OK", 1)
    assert streamed["input_hash"] == ADD_SUB_HASH


def test_bytes_inputs_are_hashed_with_their_length_prefixes(logged: LoggedServer) -> None:
    texts = ["ab", "", "héllo"]
    body = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [3, 1], "data": texts}]}

    status, _, _ = post(logged.http_port, "/v2/models/text/infer", body, {"x-request-id": "bytes-1"})

    expected = reference_hash(("TEXT", "BYTES", (3, 1), bytes_elements(*(t.encode() for t in texts))))
    assert status == 200
    record = inference(logged, "bytes-1")
    assert record["input_hash"] == expected
    assert record["output_summary"] == {"output": "TEXT_OUT", "redacted": True}


def test_errors_are_recorded_with_their_status_and_message(logged: LoggedServer) -> None:
    missing, _, missing_headers = post(
        logged.http_port, "/v2/models/nope/infer", add_sub_body(), {"x-request-id": "err-404"}
    )
    wrong = add_sub_body()
    wrong["inputs"][0]["shape"] = [1, 15]
    wrong["inputs"][0]["data"] = INPUT0[:15]
    invalid, _, _ = post(logged.http_port, "/v2/models/add_sub/infer", wrong, {"x-request-id": "err-400"})

    assert (missing, invalid) == (404, 400)
    assert missing_headers["x-request-id"] == "err-404"
    not_found = inference(logged, "err-404")
    assert (not_found["status"], not_found["model"], not_found["output_summary"]) == (404, "nope", None)
    assert "nope" in not_found["error"]
    bad = inference(logged, "err-400")
    assert bad["status"] == 400 and "INPUT0" in bad["error"]


def test_the_generate_endpoint_is_recorded_with_the_same_hash(logged: LoggedServer) -> None:
    status, _, headers = post(
        logged.http_port,
        "/v2/models/add_sub/generate",
        {"INPUT0": INPUT0, "INPUT1": INPUT1},
        {"x-request-id": "generate-1"},
    )

    assert status == 200 and headers["x-request-id"] == "generate-1"
    record = inference(logged, "generate-1")
    assert (record["endpoint"], record["status"], record["input_hash"]) == ("generate", 200, ADD_SUB_HASH)


def test_a_sampled_body_never_holds_a_redacted_input_only_its_hash(
    logged: LoggedServer, audit_path: Path
) -> None:
    post(logged.http_port, "/v2/models/add_sub/infer", add_sub_body(), {"x-request-id": "audited-1"})
    text = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1, 1], "data": [SECRET_TEXT]}]}
    post(logged.http_port, "/v2/models/text/infer", text, {"x-request-id": "audited-2"})

    entry = audit_entry(audit_path, "audited-1")
    assert entry["event"] == "inference_audit" and entry["status"] == 200
    first, second = entry["request"]["inputs"]
    assert (first["name"], first["data"]) == ("INPUT0", INPUT0)
    assert second == {
        "name": "INPUT1",
        "datatype": "FP32",
        "shape": [1, 16],
        "redacted": True,
        "sha256": reference_hash(("INPUT1", "FP32", (1, 16), fp32(INPUT1))),
    }
    assert entry["responses"][0]["outputs"][0]["data"] == [a + b for a, b in zip(INPUT0, INPUT1, strict=True)]
    strings = audit_entry(audit_path, "audited-2")
    (redacted,) = strings["request"]["inputs"]
    assert redacted["sha256"] == reference_hash(
        ("TEXT", "BYTES", (1, 1), bytes_elements(SECRET_TEXT.encode()))
    )
    audit_text = audit_path.read_text()
    assert str(SECRET_VALUE) not in audit_text and SECRET_TEXT not in audit_text
    assert str(SECRET_VALUE) not in "\n".join(logged.log_lines())
    assert SECRET_TEXT not in "\n".join(logged.log_lines())


def test_access_log_levels_and_unload_events_all_go_through_the_json_formatter(logged: LoggedServer) -> None:
    status, _, _ = post(logged.http_port, "/v2/repository/models/text/unload", {})

    assert status == 200
    unloaded = records_where(
        logged, lambda r: r.get("event") == "model_unloaded" and r.get("model") == "text"
    )
    assert unloaded and unloaded[0]["level"] == "INFO"
    access = records_where(
        logged, lambda r: r.get("event") == "http_access" and r.get("path", "").endswith("/unload")
    )
    assert access and (access[0]["method"], access[0]["status"], access[0]["logger"]) == (
        "POST",
        200,
        "conch.http.access",
    )
    records = json_records(logged.log_lines())  # fails on any line that is not one JSON object
    assert {r["level"] for r in records} <= {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}
    assert any(r.get("event") == "model_loaded" for r in records)


def test_by_default_there_are_no_records_and_http_echoes_only_the_clients_id(plain: LoggedServer) -> None:
    status, _, headers = post(
        plain.http_port, "/v2/models/add_sub/infer", add_sub_body(), {"x-request-id": "plain-1"}
    )
    _, _, unnamed = post(plain.http_port, "/v2/models/add_sub/infer", add_sub_body("plain-v2"))
    request = add_sub_message("plain-grpc")
    with grpc.insecure_channel(f"127.0.0.1:{plain.grpc_port}") as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        _, call = stub.ModelInfer.with_call(
            request, metadata=(("x-request-id", "plain-grpc-id"),), timeout=30
        )

    assert status == 200 and headers["x-request-id"] == "plain-1"
    assert "x-request-id" not in unnamed
    assert "x-request-id" not in dict(call.trailing_metadata())
    records = json_records(plain.log_lines())
    assert records and not [r for r in records if r.get("event") in ("inference", "http_access")]


def test_sampling_without_an_audit_file_is_refused_before_the_server_starts(repository: Path) -> None:
    import subprocess
    import sys

    port = str(free_port())
    done = subprocess.run(
        [sys.executable, "-m", "conch.cli.main", "serve", str(repository), "--http-port", port],
        env={"CONCH_LOG_SAMPLE_BODIES": "0.5", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 2
    assert "--log-sample-bodies needs --audit-log" in done.stderr


def test_the_generate_stream_endpoint_is_one_record_counting_its_events(logged: LoggedServer) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", logged.http_port, timeout=30)
    try:
        body = json.dumps({"INPUT0": INPUT0, "INPUT1": INPUT1})
        connection.request("POST", "/v2/models/add_sub/generate_stream", body, {"x-request-id": "stream-1"})
        reply = connection.getresponse()
        events = reply.read().decode()
    finally:
        connection.close()

    assert reply.status == 200 and reply.getheader("x-request-id") == "stream-1"
    assert events.count("data: ") == 1
    record = inference(logged, "stream-1")
    assert (record["endpoint"], record["status"], record["responses"]) == ("generate_stream", 200, 1)
    assert record["input_hash"] == ADD_SUB_HASH


@pytest.fixture(scope="module")
def limited(repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoggedServer]:
    """Records on, and a client rate limit of one request (no refill to speak of)."""
    server = start_logged_server(
        repository,
        tmp_path_factory.mktemp("limited"),
        *("--log-format", "json", "--log-inferences", "true"),
        *("--client-rate-limit", "0.001", "--client-burst", "1"),
    )
    yield server
    server.stop()


def test_a_call_the_gateway_refuses_is_recorded_with_its_status(limited: LoggedServer) -> None:
    statuses = []
    for number in range(2):
        status, _, headers = post(
            limited.http_port,
            "/v2/models/add_sub/infer",
            add_sub_body(),
            {"x-request-id": f"limited-{number}"},
        )
        statuses.append((status, headers["x-request-id"]))
    codes = []
    with grpc.insecure_channel(f"127.0.0.1:{limited.grpc_port}") as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        for number in range(2):  # gRPC's peer is a client of its own: its first call is let in
            with pytest.raises(grpc.RpcError) as refused:
                stub.ModelInfer(
                    pb.ModelInferRequest(model_name="add_sub", id=f"limited-grpc-{number}"), timeout=30
                )
            codes.append(refused.value.code())

    assert statuses == [(200, "limited-0"), (429, "limited-1")]
    assert codes == [grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED]
    http_refusal = inference(limited, "limited-1")
    assert http_refusal["status"] == 429 and http_refusal["model"] == "add_sub"
    assert http_refusal["input_hash"] is None and http_refusal["queue_ms"] is None
    assert inference(limited, "limited-grpc-0")["status"] == "INVALID_ARGUMENT"
    assert inference(limited, "limited-grpc-1")["status"] == "RESOURCE_EXHAUSTED"


@pytest.fixture(scope="module")
def traced(repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoggedServer]:
    """Records on and every request traced (to a port nobody listens on: the spans are dropped)."""
    server = start_logged_server(
        repository,
        tmp_path_factory.mktemp("traced"),
        *("--log-format", "json", "--log-inferences", "true"),
        *("--trace-otlp-endpoint", f"http://127.0.0.1:{free_port()}/v1/traces", "--trace-sample-ratio", "1"),
        env={"OTEL_EXPORTER_OTLP_TIMEOUT": "1"},  # the exporter gives up at once at exit
    )
    yield server
    server.stop()


def test_a_traced_requests_record_carries_its_trace_id(traced: LoggedServer) -> None:
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    parent = f"00-{trace_id}-00f067aa0ba902b7-01"
    post(
        traced.http_port,
        "/v2/models/add_sub/infer",
        add_sub_body(),
        {"traceparent": parent, "x-request-id": "t-1"},
    )
    with grpc.insecure_channel(f"127.0.0.1:{traced.grpc_port}") as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        stub.ModelInfer(add_sub_message("t-2"), metadata=(("traceparent", parent),), timeout=30)

    assert inference(traced, "t-1")["trace_id"] == trace_id
    assert inference(traced, "t-2")["trace_id"] == trace_id
