"""``conch serve --grpc-relay``: the relay process's life. What it serves is tested by running every
test of ``test_grpc_infer.py`` and ``test_grpc_endpoints.py`` against it as well."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import psutil
import tritonclient.grpc as grpcclient

from tests.fixtures.onnx_models import add_sub_grpc_inputs, add_sub_model, write_repository
from tests.integration.server_process import ServerProcess, free_port


def relay_processes(server: ServerProcess) -> list[psutil.Process]:
    assert server.process is not None
    children = psutil.Process(server.process.pid).children(recursive=True)
    return [child for child in children if "conch.frontends.grpc.relay" in " ".join(child.cmdline())]


def test_relay_serves_gRPC_and_goes_away_with_the_server(tmp_path: Path) -> None:
    root = write_repository(tmp_path / "models", {"add-sub": (add_sub_model(), None)})
    server = ServerProcess(root, ["--grpc-relay", "true"]).start(tmp_path)
    try:
        (relay,) = relay_processes(server)
        client = grpcclient.InferenceServerClient(server.grpc_url)

        result = client.infer("add-sub", add_sub_grpc_inputs(value=3))

        assert result.as_numpy("OUTPUT0").tolist() == [[6.0] * 16]
        statistics = client.get_inference_statistics("add-sub", as_json=True)["model_stats"][0]
        assert int(statistics["inference_count"]) == 1, "relayed calls are the model process's calls"
    finally:
        exit_code = server.stop()
    assert exit_code == 0
    relay.wait(timeout=10)
    assert not relay.is_running()


def test_conch_grpc_relay_variable_starts_the_relay(tmp_path: Path) -> None:
    root = write_repository(tmp_path / "models", {"add-sub": (add_sub_model(), None)})
    env = {"CONCH_GRPC_RELAY": "true"}
    server = ServerProcess(root, env=env, console_script=True).start(tmp_path)
    try:
        relays = relay_processes(server)
        with grpcclient.InferenceServerClient(server.grpc_url) as client:
            result = client.infer("add-sub", add_sub_grpc_inputs(value=4))
    finally:
        exit_code = server.stop()
    assert exit_code == 0
    assert len(relays) == 1
    assert result.as_numpy("OUTPUT0").tolist() == [[8.0] * 16]


def test_a_taken_gRPC_port_is_one_clear_error(tmp_path: Path) -> None:
    root = write_repository(tmp_path / "models", {"add-sub": (add_sub_model(), None)})
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        grpc_port = taken.getsockname()[1]
        command = [sys.executable, "-m", "conch.cli.main", "serve", str(root), "--host", "127.0.0.1"]
        command += ["--http-port", str(free_port()), "--metrics-port", str(free_port())]
        command += ["--grpc-port", str(grpc_port), "--grpc-relay", "true"]
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=60,
        )

    assert done.returncode == 1
    assert f"conch: cannot listen on 127.0.0.1:{grpc_port} (gRPC)" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_relay_is_for_one_process() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "conch.cli.main", "serve", "--grpc-relay", "true", "--workers", "2"],
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 2
    assert "use it without --workers" in done.stderr


def test_a_relay_that_dies_stops_the_server_with_an_error(tmp_path: Path) -> None:
    root = write_repository(tmp_path / "models", {"add-sub": (add_sub_model(), None)})
    server = ServerProcess(root, ["--grpc-relay", "true"]).start(tmp_path)
    (relay,) = relay_processes(server)

    relay.kill()

    assert server.process is not None
    assert server.process.wait(timeout=30) == 1
    assert "conch: the gRPC relay process exited; the server stopped" in server.log()
