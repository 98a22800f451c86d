"""The installed ``conch`` command, as a user runs it after ``pip install``: it serves, and a flag wins
over its ``CONCH_*`` variable (``docs/configuration.md``)."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import numpy as np
import psutil
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

import conch
from tests.fixtures.onnx_models import add_sub_grpc_inputs, add_sub_model, write_repository
from tests.integration.server_process import ServerProcess, conch_command, free_port


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """add-sub with its config left to auto-complete, and a model that cannot load."""
    root = write_repository(
        tmp_path_factory.mktemp("console") / "models",
        {"add-sub": (add_sub_model(), None), "not-onnx": (add_sub_model(), None)},
    )
    (root / "not-onnx" / "1" / "model.onnx").write_bytes(b"not an onnx model")
    return root


def test_conch_version_names_the_package_version() -> None:
    done = subprocess.run([conch_command(), "--version"], capture_output=True, text=True, timeout=60)

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"conch {conch.__version__}"


def test_the_installed_command_serves_http_and_grpc(repository: Path, tmp_path: Path) -> None:
    server = ServerProcess(repository, console_script=True).start(tmp_path)
    try:
        assert server.process is not None
        assert psutil.Process(server.process.pid).cmdline()[1] == conch_command()
        with httpclient.InferenceServerClient(server.http_url) as client:
            assert client.is_model_ready("add-sub")
        with grpcclient.InferenceServerClient(server.grpc_url) as client:
            result = client.infer("add-sub", add_sub_grpc_inputs(value=2.5))
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full((1, 16), 5.0, np.float32))
    finally:
        exit_code = server.stop()
    assert exit_code == 0


def test_a_flag_wins_over_its_variable(repository: Path, tmp_path: Path) -> None:
    ignored_http_port = free_port()
    env = {
        "CONCH_HTTP_PORT": str(ignored_http_port),
        "CONCH_DEFAULT_MAX_BATCH_SIZE": "2",
        "CONCH_STRICT_READINESS": "false",
    }
    flags = ["--default-max-batch-size", "3", "--strict-readiness", "true"]
    # ServerProcess passes --http-port (and the other ports) as flags.
    server = ServerProcess(repository, flags, env, console_script=True).start(tmp_path)
    try:
        assert server.http_port != ignored_http_port
        assert server.request("GET", "/v2/models/add-sub/config").json()["max_batch_size"] == 3
        assert server.request("GET", "/v2/health/ready").status == 503, "not-onnx failed: strict says no"
        with (
            pytest.raises(ConnectionRefusedError),
            socket.create_connection(("127.0.0.1", ignored_http_port)),
        ):
            pass
    finally:
        exit_code = server.stop()
    assert exit_code == 0


def test_the_variables_alone_configure_the_same_options(repository: Path, tmp_path: Path) -> None:
    # The reference for the test above: without the flags, these variables do take effect.
    env = {"CONCH_DEFAULT_MAX_BATCH_SIZE": "2", "CONCH_STRICT_READINESS": "false"}
    server = ServerProcess(repository, env=env, port_flags=False, console_script=True).start(tmp_path)
    try:
        assert server.request("GET", "/v2/models/add-sub/config").json()["max_batch_size"] == 2
        assert server.request("GET", "/v2/health/ready").status == 200
    finally:
        exit_code = server.stop()
    assert exit_code == 0
