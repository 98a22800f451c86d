"""Server-side limits against a real ``conch serve``: body, header size and count, connections,
idle and slow-client timeouts, JSON depth, tensor element counts, and gRPC's message size.

Every limit is set low here so that a test crosses it with a small request; each refusal is checked
for its status and for a message naming the flag, and the server is checked to serve others after.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from onnx import TensorProto
from tritonclient.utils import InferenceServerException

from tests.fixtures.onnx_models import ADD_SUB_CONFIG, add_sub_model, identity_model, write_repository
from tests.integration.server_process import ServerProcess

SLOW_CLIENT_SECS = 2
IDLE_SECS = 2


@pytest.fixture(scope="module")
def server(
    start_server: Callable[..., ServerProcess], tmp_path_factory: pytest.TempPathFactory
) -> ServerProcess:
    repository = write_repository(
        tmp_path_factory.mktemp("server-limits") / "models",
        {
            "identity": (identity_model(TensorProto.FLOAT), None),
            "add_sub": (add_sub_model(), ADD_SUB_CONFIG.replace("{name}", "add_sub")),
        },
    )
    return start_server(
        repository,
        "--http-max-body-bytes", "65536",
        "--http-max-header-bytes", "8192",
        "--http-max-headers", "20",
        "--http-max-connections", "6",
        "--http-slow-client-timeout-secs", str(SLOW_CLIENT_SECS),
        "--http-min-body-rate", "10",  # test_a_slow_but_steady_body_is_read sends 30 bytes a second
        "--max-input-elements", "1000",
        "--grpc-max-message-bytes", "65536",
        env={
            "CONCH_HTTP_IDLE_TIMEOUT_SECS": str(IDLE_SECS),
            "CONCH_HTTP_MAX_JSON_DEPTH": "8",
            "CONCH_MAX_REQUEST_ELEMENTS": "1500",
        },
    )  # fmt: skip


def infer_body(rows: int = 1, **extra: object) -> bytes:
    data = [float(i) for i in range(rows * 4)]
    document = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [rows, 4], "data": data}], **extra}
    return json.dumps(document).encode()


def serves_others(server: ServerProcess) -> bool:
    reply = server.request("POST", "/v2/models/identity/infer", infer_body())
    return reply.status == 200 and reply.json()["outputs"][0]["data"] == [0.0, 1.0, 2.0, 3.0]


def raw_exchange(server: ServerProcess, data: bytes, timeout: float = 10.0) -> bytes:
    """Send ``data`` on a fresh connection and read until the server closes it."""
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=timeout) as sock:
        sock.sendall(data)
        return read_until_closed(sock)


def read_until_closed(sock: socket.socket) -> bytes:
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received


def test_a_body_over_the_limit_is_refused_with_the_flag_named(server: ServerProcess) -> None:
    refused = server.request("POST", "/v2/models/identity/infer", infer_body(rows=4000))
    assert refused.status == 413
    assert "--http-max-body-bytes" in refused.json()["error"]
    assert "65536 byte limit" in refused.json()["error"]
    assert serves_others(server)


def test_headers_over_the_size_or_count_get_431(server: ServerProcess) -> None:
    big = server.request("GET", "/v2/health/ready", headers={"x-padding": "a" * 9000})
    assert big.status == 431
    assert "--http-max-header-bytes" in big.json()["error"]
    many = server.request("GET", "/v2/health/ready", headers={f"x-h{i}": "1" for i in range(25)})
    assert many.status == 431
    assert "more than 20 headers" in many.json()["error"]
    assert (
        server.request("GET", "/v2/health/ready", headers={f"x-h{i}": "1" for i in range(10)}).status == 200
    )


def test_connections_over_the_cap_get_503_and_the_server_recovers(server: ServerProcess) -> None:
    held = [socket.create_connection(("127.0.0.1", server.http_port), timeout=10) for _ in range(6)]
    try:
        time.sleep(0.3)  # the server has accepted them all
        answer = raw_exchange(server, b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 503 ")
        assert b"--http-max-connections" in answer
    finally:
        for sock in held:
            sock.close()
    deadline = time.monotonic() + 10
    while not serves_others(server):
        assert time.monotonic() < deadline, "the server did not serve again once the connections closed"
        time.sleep(0.2)


def test_a_slowloris_client_is_cut_off_while_others_are_served(server: ServerProcess) -> None:
    head = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nx-slow: " + b"a" * 200
    outcome: dict[str, object] = {}

    def trickle() -> None:
        with socket.create_connection(("127.0.0.1", server.http_port), timeout=20) as sock:
            started = time.monotonic()
            try:
                for byte in head:
                    sock.sendall(bytes([byte]))
                    time.sleep(0.05)
            except OSError:
                pass  # the server closed the connection on us
            outcome["answer"] = read_until_closed(sock)
            outcome["seconds"] = time.monotonic() - started

    slow = threading.Thread(target=trickle)
    slow.start()
    served = 0
    while slow.is_alive():
        assert serves_others(server)
        served += 1
        time.sleep(0.1)
    slow.join()
    assert served >= 5
    assert SLOW_CLIENT_SECS - 0.5 <= float(outcome["seconds"]) < SLOW_CLIENT_SECS + 5  # type: ignore[arg-type]
    answer = outcome["answer"]
    assert isinstance(answer, bytes) and answer.startswith(b"HTTP/1.1 408 ")
    assert b"--http-slow-client-timeout-secs" in answer


def test_a_body_that_stops_arriving_is_cut_off_with_408(server: ServerProcess) -> None:
    head = b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=20) as sock:
        sock.sendall(head + b'{"inputs": [')
        started = time.monotonic()
        answer = read_until_closed(sock)
        assert SLOW_CLIENT_SECS - 0.5 <= time.monotonic() - started < SLOW_CLIENT_SECS + 5
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert b"request body" in answer
    assert serves_others(server)


def test_a_slow_but_steady_body_is_read(server: ServerProcess) -> None:
    body = infer_body()
    head = f"POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n"
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=20) as sock:
        sock.sendall(head.encode())
        for start in range(0, len(body), len(body) // 3 + 1):  # each piece well inside the timeout
            time.sleep(SLOW_CLIENT_SECS * 0.6)
            sock.sendall(body[start : start + len(body) // 3 + 1])
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")


def test_a_silent_connection_is_cut_off_after_the_slow_client_timeout(server: ServerProcess) -> None:
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=20) as sock:
        started = time.monotonic()
        answer = read_until_closed(sock)
        assert SLOW_CLIENT_SECS - 0.5 <= time.monotonic() - started < SLOW_CLIENT_SECS + 5
    assert answer.startswith(b"HTTP/1.1 408 ")


def test_an_idle_keep_alive_connection_closes_after_the_idle_timeout(server: ServerProcess) -> None:
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=20) as sock:
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        first = sock.recv(65536)
        assert first.startswith(b"HTTP/1.1 200 ")
        answered = time.monotonic()
        assert read_until_closed(sock) == b""
        assert IDLE_SECS - 0.5 <= time.monotonic() - answered < IDLE_SECS + 5


def test_json_nested_over_the_depth_is_refused(server: ServerProcess) -> None:
    deep: object = "leaf"
    for _ in range(10):
        deep = {"k": deep}
    refused = server.request("POST", "/v2/models/identity/infer", infer_body(parameters={"x": deep}))
    assert refused.status == 400
    assert "--http-max-json-depth" in refused.json()["error"]
    index = server.request(
        "POST", "/v2/repository/index", json.dumps({"ready": [[[[[[[[[1]]]]]]]]]}).encode()
    )
    assert index.status == 400 and "more than 8 deep" in index.json()["error"]
    # Tensor data nests with its shape and is not counted: [rows, 4] as nested lists is fine.
    nested = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [2, 4], "data": [[1, 2, 3, 4]] * 2}]}
    assert server.request("POST", "/v2/models/identity/infer", json.dumps(nested).encode()).status == 200


def binary_input(name: str, rows: int, width: int) -> tuple[dict[str, object], bytes]:
    data = np.ones((rows, width), np.float32).tobytes()
    entry = {
        "name": name,
        "datatype": "FP32",
        "shape": [rows, width],
        "parameters": {"binary_data_size": len(data)},
    }
    return entry, data


def test_inputs_over_the_element_caps_are_refused(server: ServerProcess) -> None:
    entry, data = binary_input("INPUT0", 300, 4)  # 1200 elements, over --max-input-elements 1000
    header = json.dumps({"inputs": [entry]}).encode()
    refused = server.request(
        "POST",
        "/v2/models/identity/infer",
        header + data,
        {"Inference-Header-Content-Length": str(len(header))},
    )
    assert refused.status == 400
    assert "input 'INPUT0' has 1200 elements" in refused.json()["error"]
    assert "--max-input-elements" in refused.json()["error"]
    first, first_data = binary_input("INPUT0", 50, 16)  # 800 + 800 elements, over 1500 in all
    second, second_data = binary_input("INPUT1", 50, 16)
    header = json.dumps({"inputs": [first, second]}).encode()
    refused = server.request(
        "POST",
        "/v2/models/add_sub/infer",
        header + first_data + second_data,
        {"Inference-Header-Content-Length": str(len(header))},
    )
    assert refused.status == 400
    assert "1600 elements" in refused.json()["error"] and "--max-request-elements" in refused.json()["error"]


def test_grpc_elements_are_capped_too(server: ServerProcess) -> None:
    tensor = grpcclient.InferInput("INPUT0", [300, 4], "FP32")
    tensor.set_data_from_numpy(np.ones((300, 4), np.float32))
    with (
        grpcclient.InferenceServerClient(server.grpc_url) as client,
        pytest.raises(InferenceServerException) as refused,
    ):
        client.infer("identity", [tensor])
    assert refused.value.status() == str(grpc.StatusCode.INVALID_ARGUMENT)
    assert "--max-input-elements" in str(refused.value.message())


def test_a_grpc_message_over_the_limit_is_resource_exhausted(server: ServerProcess) -> None:
    tensor = grpcclient.InferInput("INPUT0", [4, 4], "FP32")
    tensor.set_data_from_numpy(np.ones((4, 4), np.float32))
    tensor_big = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
    tensor_big.set_data_from_numpy(np.ones((1, 4), np.float32))
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        with pytest.raises(InferenceServerException) as refused:
            # 70 KB of request parameters: over --grpc-max-message-bytes 65536 before any decoding.
            client.infer("identity", [tensor_big], parameters={"padding": "a" * 70000})
        assert refused.value.status() == str(grpc.StatusCode.RESOURCE_EXHAUSTED)
        answer = client.infer("identity", [tensor])
    assert answer.as_numpy("OUTPUT0").shape == (4, 4)
