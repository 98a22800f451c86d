"""One regression test per class of hole that conch's peers shipped, against a real ``conch serve``.

- A management API open without a token (TorchServe's CVE-2023-43654, Ray's "ShadowRay"): with
  ``--auth jwt``, load, unload, release changes, shared-memory registration and log settings answer
  401 without a token (403 without the admin scope) and do nothing.
- A log-file path API (Triton's CVE-2024-0087): ``/v2/logging`` refuses ``log_file``, and no file is
  written.
- Traversal in model names and load overrides: nothing outside the repository is read or written.
- A pickled body: conch never unpickles what a client sends (a pickle that would create a file
  leaves none).
- A chunked flood: a chunked body that never ends is cut off at the body limit, and the server serves
  others.
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from onnx import TensorProto
from tritonclient.grpc import service_pb2
from tritonclient.utils import InferenceServerException

from tests.fixtures.gateway_keys import AUTH_FLAGS, bearer, write_jwks
from tests.fixtures.onnx_models import identity_model, string_model, write_repository
from tests.integration.server_process import ServerProcess

BODY_LIMIT = 1 << 20


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cve")
    return write_repository(
        root / "models",
        {"iris": (identity_model(TensorProto.FLOAT), None), "strings": (string_model(), None)},
    )


@pytest.fixture(scope="module")
def server(start_server: Callable[..., ServerProcess], repository: Path) -> ServerProcess:
    jwks = write_jwks(repository.parent / "jwks.json")
    return start_server(
        repository,
        *AUTH_FLAGS,
        "--jwt-jwks", str(jwks),
        "--model-control-mode", "explicit",
        "--load-model", "*",
        "--http-max-body-bytes", str(BODY_LIMIT),
    )  # fmt: skip


def admin() -> dict[str, str]:
    return bearer("infer admin")


def infer_only() -> dict[str, str]:
    return bearer("infer")


def grpc_infer_only() -> dict[str, str]:
    return bearer("infer")


MANAGEMENT_CALLS = [
    ("POST", "/v2/repository/models/iris/unload", b"{}"),
    ("POST", "/v2/repository/models/iris/load", json.dumps({"parameters": {"config": "{}"}}).encode()),
    ("POST", "/v2/models/iris/release", b'{"candidate": "2"}'),
    ("POST", "/v2/models/iris/release/rollback", b""),
    (
        "POST",
        "/v2/systemsharedmemory/region/stolen/register",
        json.dumps({"key": "/conch-cve", "offset": 0, "byte_size": 64}).encode(),
    ),
    ("POST", "/v2/logging", json.dumps({"log_verbose_level": 1}).encode()),
    ("POST", "/v2/trace/setting", json.dumps({"trace_rate": "7"}).encode()),
    ("POST", "/v2/models/iris/trace/setting", json.dumps({"trace_count": "3"}).encode()),
]


@pytest.mark.parametrize(("method", "path", "body"), MANAGEMENT_CALLS, ids=[c[1] for c in MANAGEMENT_CALLS])
def test_management_without_a_token_is_401_and_not_performed(
    server: ServerProcess, method: str, path: str, body: bytes
) -> None:
    refused = server.request(method, path, body)
    assert refused.status == 401
    assert refused.headers["www-authenticate"].startswith("Bearer")
    assert server.request(method, path, body, infer_only()).status == 403
    # Nothing happened: the model is served and no region is registered.
    assert server.request("GET", "/v2/models/iris/ready", headers=infer_only()).status == 200
    regions = server.request("GET", "/v2/systemsharedmemory/status", headers=admin())
    assert regions.status == 200 and regions.json() == []


def test_grpc_management_without_a_token_is_unauthenticated(server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        with pytest.raises(InferenceServerException) as refused:
            client.unload_model("iris")
        assert refused.value.status() == str(grpc.StatusCode.UNAUTHENTICATED)
        assert client.is_model_ready("iris", headers=grpc_infer_only())


def test_the_log_file_api_is_refused_and_writes_nothing(server: ServerProcess, tmp_path: Path) -> None:
    target = tmp_path / "evil.log"
    refused = server.request("POST", "/v2/logging", json.dumps({"log_file": str(target)}).encode(), admin())
    assert refused.status == 403
    assert "CVE-2024-0087" in refused.json()["error"] and str(target) not in refused.json()["error"]
    settings = server.request("GET", "/v2/logging", headers=admin())
    assert settings.status == 200 and settings.json()["log_file"] == ""
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        stub = client._client_stub
        request = service_pb2.LogSettingsRequest()
        request.settings["log_file"].string_param = str(target)
        with pytest.raises(grpc.RpcError) as grpc_refused:
            stub.LogSettings(request, metadata=[("authorization", admin()["authorization"])])
    assert grpc_refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "CVE-2024-0087" in str(grpc_refused.value.details())
    time.sleep(0.2)
    assert not target.exists()


def test_the_trace_file_api_is_refused_and_writes_nothing(server: ServerProcess, tmp_path: Path) -> None:
    """Triton's trace settings name a file too; conch exports spans over OTLP and writes none."""
    target = tmp_path / "evil.trace"
    for path in ("/v2/trace/setting", "/v2/models/iris/trace/setting"):
        body = json.dumps({"trace_file": str(target), "trace_level": ["TIMESTAMPS"]}).encode()
        refused = server.request("POST", path, body, admin())
        assert refused.status == 403 and str(target) not in refused.json()["error"]
    with (
        grpcclient.InferenceServerClient(server.grpc_url) as client,
        pytest.raises(InferenceServerException) as grpc_refused,
    ):
        client.update_trace_settings(settings={"trace_file": str(target)}, headers=admin())
    assert grpc_refused.value.status() == "StatusCode.PERMISSION_DENIED"
    time.sleep(0.2)
    assert not target.exists()


@pytest.mark.parametrize(
    "path",
    [
        "/v2/models/..%2F..%2Fetc%2Fpasswd/config",
        "/v2/models/../../etc/passwd/config",
        "/v2/models/%2Fetc%2Fpasswd",
        "/v2/models/iris/versions/..%2F..%2F1/config",
    ],
)
def test_traversal_in_model_names_finds_nothing(server: ServerProcess, path: str) -> None:
    reply = server.request("GET", path, headers=admin())
    assert reply.status in (400, 404)
    assert "root:" not in reply.body.decode(errors="replace")


def test_traversal_in_load_names_and_overrides_is_refused(server: ServerProcess, repository: Path) -> None:
    outside = repository.parent / "outside"
    for name in ("..%2Foutside", "%2Ftmp%2Fconch-cve"):
        reply = server.request("POST", f"/v2/repository/models/{name}/load", b"{}", admin())
        assert reply.status in (400, 404), reply.body
    payload = base64.b64encode(b"not a model").decode()
    for key in ("file:../../outside/1/model.onnx", f"file:{outside}/model.onnx", "file:1/model.onnx"):
        body = json.dumps({"parameters": {"config": '{"backend": "onnxruntime"}', key: payload}}).encode()
        reply = server.request("POST", "/v2/repository/models/iris/load", body, admin())
        assert reply.status == 400
        assert "file:" in reply.json()["error"]
    assert not outside.exists()
    assert not (repository / "iris" / "1" / "model.onnx").read_bytes().startswith(b"not a model")
    assert server.request("GET", "/v2/models/iris/ready", headers=infer_only()).status == 200


class _CreatesFile:
    """Unpickling this opens (and so creates) the file: the side effect the test looks for."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (str(self.path), "w"))


def test_a_pickled_body_is_never_unpickled(server: ServerProcess, tmp_path: Path) -> None:
    marker = tmp_path / "unpickled"
    payload = pickle.dumps(_CreatesFile(marker))
    for content_type in ("application/octet-stream", "application/python-pickle"):
        reply = server.request(
            "POST", "/v2/models/iris/infer", payload, {**admin(), "Content-Type": content_type}
        )
        assert reply.status == 400
        assert "not valid JSON" in reply.json()["error"]
    reply = server.request(
        "POST",
        "/v2/models/iris/infer",
        payload,
        {**admin(), "Inference-Header-Content-Length": "0"},
    )
    assert reply.status == 400
    assert server.request("POST", "/v2/repository/models/iris/load", payload, admin()).status == 400
    # As a BYTES tensor the pickle is data, checked as such (an ONNX string must be UTF-8), never loaded.
    tensor = grpcclient.InferInput("TEXT", [1, 1], "BYTES")
    tensor.set_data_from_numpy(np.array([[payload]], dtype=object))
    with (
        grpcclient.InferenceServerClient(server.grpc_url) as client,
        pytest.raises(InferenceServerException) as bytes_refused,
    ):
        client.infer("strings", [tensor], headers=grpc_infer_only())
    assert bytes_refused.value.status() == str(grpc.StatusCode.INVALID_ARGUMENT)
    assert "UTF-8" in str(bytes_refused.value.message())
    time.sleep(0.2)
    assert not marker.exists()
    assert not os.path.exists(Path.cwd() / marker.name)


def test_a_chunked_flood_is_cut_off_at_the_body_limit_and_others_are_served(server: ServerProcess) -> None:
    head = (
        "POST /v2/models/iris/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
        f"Content-Type: application/json\r\nAuthorization: {admin()['authorization']}\r\n\r\n"
    ).encode()
    chunk = b"%x\r\n%s\r\n" % (65536, b" " * 65536)
    sent = {"bytes": 0, "stopped_by": ""}
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=20) as sock:

        def flood() -> None:
            try:
                sock.sendall(head)
                while sent["bytes"] < 256 * BODY_LIMIT:  # never ends, as far as the server can tell
                    sock.sendall(chunk)
                    sent["bytes"] += len(chunk)
            except OSError as exc:
                sent["stopped_by"] = type(exc).__name__

        sender = threading.Thread(target=flood)
        sender.start()
        answer = b""
        try:
            while chunk_read := sock.recv(65536):
                answer += chunk_read
        except ConnectionResetError:
            pass
        sender.join(timeout=30)
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]
    assert b"--http-max-body-bytes" in answer
    assert sent["stopped_by"], f"the server read {sent['bytes']} bytes of a flood without closing"
    assert sent["bytes"] < 64 * BODY_LIMIT
    ready = server.request("GET", "/v2/models/iris/ready", headers=infer_only())
    assert ready.status == 200
