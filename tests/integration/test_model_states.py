"""A repository with broken models: the server still starts, serves what loads, and says why the rest failed.

Also the server's process life: the start-up table, readiness with and without strict readiness,
configuration through ``CONCH_*`` environment variables, and clean exits on SIGTERM and SIGINT.
"""

from __future__ import annotations

import json
import signal
import socket
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from onnx import TensorProto
from tritonclient.utils import InferenceServerException

from tests.fixtures.onnx_models import add_sub_model, identity_model, write_repository
from tests.integration.server_process import ServerProcess

NOT_ONNX = np.random.default_rng(7).bytes(512)  # what a truncated download or a wrong file looks like

# (model, version) -> state of every entry the repository index must show.
EXPECTED_STATES = {
    ("good", "1"): "READY",
    ("bad-config", ""): "UNAVAILABLE",
    ("not-onnx", "1"): "UNAVAILABLE",
    ("wrong-name", ""): "UNAVAILABLE",
    ("half-broken", "1"): "READY",
    ("half-broken", "2"): "UNAVAILABLE",
}


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    identity = identity_model(TensorProto.FLOAT)
    root = write_repository(
        tmp_path_factory.mktemp("states") / "models",
        {
            "good": (add_sub_model(), None),
            "bad-config": (identity, 'name: "bad-config"\nmax_batch_size: [ not a number\n'),
            "not-onnx": (identity, None),
            "wrong-name": (identity, 'name: "another-name"\n'),
            "half-broken": (identity, 'name: "half-broken"\nversion_policy: { all { } }\n'),
        },
    )
    (root / "not-onnx" / "1" / "model.onnx").write_bytes(NOT_ONNX)
    (root / "half-broken" / "2").mkdir()
    (root / "half-broken" / "2" / "model.onnx").write_bytes(NOT_ONNX)
    return root


@pytest.fixture(scope="module")
def strict_server(start_server: Callable[..., ServerProcess], repository: Path) -> ServerProcess:
    return start_server(repository)


@pytest.fixture(scope="module")
def lenient_server(start_server: Callable[..., ServerProcess], repository: Path) -> ServerProcess:
    return start_server(repository, "--strict-readiness", "false")


@pytest.fixture(scope="module")
def client(strict_server: ServerProcess) -> Iterator[httpclient.InferenceServerClient]:
    with httpclient.InferenceServerClient(strict_server.http_url) as triton:
        yield triton


def assert_no_path(message: str, repository: Path) -> None:
    """Reasons and errors go to clients: they must not reveal where the repository lives."""
    assert str(repository) not in message
    assert str(repository.resolve()) not in message
    assert repository.parent.name not in message


def identity_request() -> bytes:
    return json.dumps(
        {"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [1.0, 2.0, 3.0, 4.0]}]}
    ).encode()


def startup_table(log: str) -> dict[tuple[str, str], str]:
    """(model, version) -> status cell of the table ``conch serve`` prints before it starts serving."""
    rows = [line.strip("|").split("|") for line in log.splitlines() if line.startswith("| ")]
    cells = [[cell.strip() for cell in row] for row in rows]
    assert cells[0] == ["Model", "Version", "Status"]
    return {(name, version): status for name, version, status in cells[1:]}


def test_startup_table_lists_models_versions_and_states(
    strict_server: ServerProcess, repository: Path
) -> None:
    table = startup_table(strict_server.log())
    assert set(table) == {(name, version or "-") for name, version in EXPECTED_STATES}
    for (name, version), state in EXPECTED_STATES.items():
        assert table[name, version or "-"].startswith(state), (name, version)
    assert table["bad-config", "-"].startswith("UNAVAILABLE: config.pbtxt does not parse")
    assert "another-name" in table["wrong-name", "-"]
    for status in table.values():
        assert_no_path(status, repository)


def test_the_good_model_serves_despite_the_broken_ones(client: httpclient.InferenceServerClient) -> None:
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    inputs = [httpclient.InferInput(f"INPUT{i}", [1, 16], "FP32") for i in range(2)]
    for tensor in inputs:
        tensor.set_data_from_numpy(a)
    result = client.infer("good", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * a)
    assert client.is_model_ready("good")


def test_index_shows_broken_models_unavailable_with_a_reason(
    client: httpclient.InferenceServerClient, repository: Path
) -> None:
    index = {(entry["name"], entry["version"]): entry for entry in client.get_model_repository_index()}
    assert {key: entry["state"] for key, entry in index.items()} == EXPECTED_STATES
    for key, state in EXPECTED_STATES.items():
        reason = index[key]["reason"]
        assert (reason == "") == (state == "READY"), key
        assert_no_path(reason, repository)
    assert "config.pbtxt does not parse" in index["bad-config", ""]["reason"]
    assert "model.onnx is not a loadable ONNX model" in index["not-onnx", "1"]["reason"]
    assert "model.onnx is not a loadable ONNX model" in index["half-broken", "2"]["reason"]
    assert "'another-name'" in index["wrong-name", ""]["reason"]
    assert "'wrong-name'" in index["wrong-name", ""]["reason"]


def test_index_with_ready_filter_leaves_out_broken_models(strict_server: ServerProcess) -> None:
    reply = strict_server.request("POST", "/v2/repository/index", b'{"ready": true}')
    assert reply.status == 200
    assert {(entry["name"], entry["version"]) for entry in reply.json()} == {
        ("good", "1"),
        ("half-broken", "1"),
    }
    assert {entry["state"] for entry in reply.json()} == {"READY"}


def test_strict_readiness_is_not_ready_while_any_model_is_unavailable(strict_server: ServerProcess) -> None:
    assert strict_server.request("GET", "/v2/health/live").status == 200
    reply = strict_server.request("GET", "/v2/health/ready")
    assert reply.status == 503
    assert "error" in reply.json()
    with httpclient.InferenceServerClient(strict_server.http_url) as client:
        assert client.is_server_live()
        assert not client.is_server_ready()


def test_without_strict_readiness_the_server_is_ready(lenient_server: ServerProcess) -> None:
    assert lenient_server.request("GET", "/v2/health/ready").status == 200
    with httpclient.InferenceServerClient(lenient_server.http_url) as client:
        assert client.is_server_ready()
        assert not client.is_model_ready("not-onnx")


@pytest.mark.parametrize(
    ("model", "version", "status"),
    [
        ("bad-config", "", 503),
        ("wrong-name", "", 503),
        ("not-onnx", "", 503),
        ("not-onnx", "1", 503),
        ("not-onnx", "2", 404),
        ("half-broken", "2", 503),
        ("half-broken", "3", 404),
        ("no-such-model", "", 404),
    ],
)
def test_inference_against_a_broken_model_fails_with_an_error_body(
    strict_server: ServerProcess,
    client: httpclient.InferenceServerClient,
    repository: Path,
    model: str,
    version: str,
    status: int,
) -> None:
    path = f"/v2/models/{model}/versions/{version}/infer" if version else f"/v2/models/{model}/infer"
    reply = strict_server.request("POST", path, identity_request())
    assert reply.status == status
    assert reply.headers["content-type"] == "application/json"
    error = reply.json()["error"]
    assert model in error
    assert_no_path(error, repository)

    tensor = httpclient.InferInput("INPUT0", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.ones((1, 4), dtype=np.float32))
    with pytest.raises(InferenceServerException) as raised:
        client.infer(model, [tensor], model_version=version)
    assert raised.value.status() == str(status)


def test_a_failed_version_leaves_the_other_versions_serving(
    strict_server: ServerProcess, client: httpclient.InferenceServerClient
) -> None:
    reply = strict_server.request("POST", "/v2/models/half-broken/infer", identity_request())
    assert reply.status == 200
    assert reply.json()["model_version"] == "1"
    assert client.is_model_ready("half-broken")
    assert client.is_model_ready("half-broken", "1")
    assert not client.is_model_ready("half-broken", "2")
    assert client.get_model_metadata("half-broken")["versions"] == ["1"]


@pytest.mark.parametrize("path", ["", "/ready", "/config"])
def test_metadata_routes_of_an_unavailable_model_are_503(
    strict_server: ServerProcess, repository: Path, path: str
) -> None:
    reply = strict_server.request("GET", f"/v2/models/not-onnx{path}")
    assert reply.status == 503
    assert_no_path(reply.json()["error"], repository)


def test_statistics_leave_out_unavailable_versions(client: httpclient.InferenceServerClient) -> None:
    stats = client.get_inference_statistics()["model_stats"]
    assert {(s["name"], s["version"]) for s in stats} == {("good", "1"), ("half-broken", "1")}


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_stops_the_server_cleanly(
    start_server: Callable[..., ServerProcess], repository: Path, sig: signal.Signals
) -> None:
    server = start_server(repository)
    assert server.request("GET", "/v2/health/live").status == 200
    assert server.stop(sig) == 0
    assert "stopped" in server.log()
    assert "Traceback" not in server.log()
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", server.http_port)):
        pass


def test_conch_environment_variables_configure_the_server(repository: Path, tmp_path: Path) -> None:
    # No flags at all: host, ports, repository and options all come from CONCH_* variables.
    env = {
        "CONCH_REPOSITORY": str(repository),
        "CONCH_STRICT_READINESS": "false",
        "CONCH_DEFAULT_MAX_BATCH_SIZE": "2",
    }
    server = ServerProcess(None, env=env, port_flags=False).start(tmp_path)
    try:
        assert server.request("GET", "/v2/health/ready").status == 200
        assert server.request("GET", "/v2/models/good/config").json()["max_batch_size"] == 2
        with urllib.request.urlopen(server.metrics_url, timeout=5) as metrics:
            assert metrics.status == 200
        socket.create_connection(("127.0.0.1", server.grpc_port), timeout=5).close()
    finally:
        exit_code = server.stop()
    assert exit_code == 0
