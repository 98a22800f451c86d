"""Model control: explicit load and unload, poll mode, hot swaps under load, failed loads, drain on SIGTERM.

The served model multiplies its input by its version number, so each answer proves which version
computed it. 32 client threads (tritonclient HTTP and gRPC, half each) send requests without pause
while versions are switched; every request must succeed, its output must match the version the
response names, and a request sent after a switch completed must never be answered by an older version.
"""

from __future__ import annotations

import json
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.fixtures.onnx_models import add_sub_model, counting_loop_model, scale_model, write_repository
from tests.integration.load_traffic import CLIENTS, Traffic
from tests.integration.server_process import ServerProcess

SWITCHES = 20
LATE_REQUEST = b'{"inputs":[{"name":"ITERATIONS","shape":[1,1],"datatype":"INT64","data":[1]}]}'
CONFIG = 'name: "scaled"\nmax_batch_size: 8\nversion_policy: { latest: { num_versions: 1 } }\n'


def add_version(root: Path, number: int, broken: bool = False) -> None:
    """Write version ``number`` of ``scaled`` aside, then move it in with one rename, as conch install."""
    staging = root / f".staging-{number}"
    staging.mkdir()
    body = b"not an onnx model" if broken else scale_model(float(number)).SerializeToString()
    (staging / "model.onnx").write_bytes(body)
    staging.rename(root / "scaled" / str(number))


def scaled_repository(root: Path) -> Path:
    write_repository(root, {"scaled": (scale_model(1.0), CONFIG), "other": (add_sub_model(), None)})
    return root


@pytest.fixture
def traffic() -> Iterator[Callable[[ServerProcess], Traffic]]:
    running: list[Traffic] = []

    def start(server: ServerProcess) -> Traffic:
        running.append(Traffic(server, "scaled").start())
        return running[-1]

    yield start
    for each in running:
        each.finish()


def check_answers(traffic: Traffic, switched_at: dict[int, float]) -> None:
    """No failure; each output matches its version; nothing older than the last switch before sending."""
    assert traffic.failures == [], traffic.failures[:5]
    assert len(traffic.answers) > 200, "too few requests to say anything"
    for answer in traffic.answers:
        assert float(answer.output[0, 0]) == answer.version, answer
        newest = max((v for v, at in switched_at.items() if at <= answer.sent), default=1)
        assert answer.version >= newest, (answer, newest)
    assert {a.version for a in traffic.answers} >= set(switched_at) - {max(switched_at)}


def load(server: ServerProcess, name: str, parameters: dict[str, Any] | None = None) -> Any:
    body = json.dumps({"parameters": parameters}).encode() if parameters is not None else b""
    return server.request("POST", f"/v2/repository/models/{name}/load", body)


def index(server: ServerProcess) -> list[dict[str, Any]]:
    reply = server.request("POST", "/v2/repository/index", b"{}")
    return list(reply.json())


def test_explicit_mode_switches_versions_under_load_with_no_failed_request(
    start_server: Callable[..., ServerProcess], tmp_path: Path, traffic: Callable[[ServerProcess], Traffic]
) -> None:
    root = scaled_repository(tmp_path / "models")
    server = start_server(root, "--model-control-mode", "explicit", "--load-model", "scaled")
    running = traffic(server)
    switched_at = {1: 0.0}
    for number in range(2, SWITCHES + 2):
        add_version(root, number)
        reply = load(server, "scaled")
        assert reply.status == 200, reply.body
        switched_at[number] = time.monotonic()
        time.sleep(0.05)
    time.sleep(0.3)
    running.finish()

    check_answers(running, switched_at)
    served = [e for e in index(server) if e["name"] == "scaled" and e["state"] == "READY"]
    assert [e["version"] for e in served] == [str(SWITCHES + 1)]
    print(f"explicit: {len(running.answers)} requests, 0 failed, {SWITCHES} version switches")


def test_poll_mode_picks_up_new_versions_under_load_with_no_failed_request(
    start_server: Callable[..., ServerProcess], tmp_path: Path, traffic: Callable[[ServerProcess], Traffic]
) -> None:
    root = scaled_repository(tmp_path / "models")
    server = start_server(root, "--model-control-mode", "poll", "--repository-poll-secs", "1")
    running = traffic(server)
    switched_at = {1: 0.0}
    for number in range(2, SWITCHES + 2):
        add_version(root, number)
        deadline = time.monotonic() + 30
        while not any(e["version"] == str(number) and e["state"] == "READY" for e in index(server)):
            assert time.monotonic() < deadline, index(server)
            time.sleep(0.05)
        switched_at[number] = time.monotonic()
    running.finish()

    check_answers(running, switched_at)
    print(f"poll: {len(running.answers)} requests, 0 failed, {SWITCHES} version switches")


def test_a_version_that_fails_to_load_leaves_the_old_one_serving(
    start_server: Callable[..., ServerProcess], tmp_path: Path, traffic: Callable[[ServerProcess], Traffic]
) -> None:
    root = scaled_repository(tmp_path / "models")
    server = start_server(root, "--model-control-mode", "explicit", "--load-model", "*")
    running = traffic(server)
    add_version(root, 2, broken=True)
    time.sleep(0.2)

    reply = load(server, "scaled")
    time.sleep(0.3)
    running.finish()

    assert reply.status == 400
    assert reply.json()["error"].startswith("failed to load 'scaled': version 2:"), reply.body
    check_answers(running, {1: 0.0})
    states = {e["version"]: (e["state"], e["reason"]) for e in index(server) if e["name"] == "scaled"}
    assert states["1"][0] == "READY" and states["1"][1].startswith("kept serving: the reload failed")
    assert states["2"][0] == "UNAVAILABLE"
    assert server.request("GET", "/v2/health/ready").status == 200, "a failed reload keeps the server ready"


def test_load_unload_and_config_override_over_http_and_grpc(
    start_server: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    root = scaled_repository(tmp_path / "models")
    server = start_server(root, "--model-control-mode", "explicit", "--load-model", "scaled")
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    http = httpclient.InferenceServerClient(server.http_url)

    assert server.request("GET", "/v2/health/ready").status == 200
    # Not loaded yet: listed by name alone, as Triton lists a folder it has not loaded (tritonclient's
    # simple_*_model_control examples count these), and left out of the ready-only index.
    assert [e for e in index(server) if e["name"] == "other"] == [{"name": "other"}]
    grpc_entries = [e for e in grpc.get_model_repository_index().models if e.name == "other"]
    assert [(e.version, e.state, e.reason) for e in grpc_entries] == [("", "", "")]
    ready_index = server.request("POST", "/v2/repository/index", b'{"ready": true}').json()
    assert [e["name"] for e in ready_index] == ["scaled"]
    http.load_model("other")
    assert grpc.is_model_ready("other")
    grpc.unload_model("other")
    assert not http.is_model_ready("other")
    assert {"name": "other", "version": "", "state": "UNAVAILABLE", "reason": "unloaded"} in index(server)
    assert server.request("GET", "/v2/health/ready").status == 200, "an unloaded model does not count"

    grpc.load_model("scaled", config=json.dumps({"max_batch_size": 2}))
    assert http.get_model_config("scaled")["max_batch_size"] == 2
    http.load_model("scaled")
    assert http.get_model_config("scaled")["max_batch_size"] == 8


@pytest.mark.parametrize(
    ("name", "parameters", "status", "message"),
    [
        (
            "scaleed",
            None,
            400,
            "failed to load 'scaleed': the model repository has no model folder 'scaleed'",
        ),
        ("../etc", None, 404, "no route"),
        (
            "scaled",
            {"config": "{not json"},
            400,
            "failed to load 'scaled': load parameter 'config' is not a valid model config",
        ),
        # tritonclient's simple_*_model_control examples send this and look for "failed to load".
        (
            "scaled",
            {"config": '"parameters": {"config": {{"max_batch_size": "16"}}}'},
            400,
            "failed to load 'scaled': load parameter 'config' is not a valid model config",
        ),
        ("scaled", {"config": '{"max_batch_size": "many"}'}, 400, "not a valid model config"),
        ("scaled", {"config": '{"name": "elsewhere"}'}, 400, "failed to load 'scaled'"),
        (
            "scaled",
            {"file:1/model.onnx": "AAAA"},
            400,
            "failed to load 'scaled': failed to poll from model repository: load parameters "
            "['file:1/model.onnx'] are refused",
        ),
        ("scaled", {"config": 3}, 400, "must be a string holding the model config as JSON"),
        ("scaled", {"colour": "red"}, 400, "unknown load parameter(s) ['colour']"),
    ],
)
def test_bad_loads_are_refused_and_change_nothing(
    start_server: Callable[..., ServerProcess],
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    parameters: dict[str, Any] | None,
    status: int,
    message: str,
) -> None:
    root = scaled_repository(tmp_path_factory.mktemp("models"))
    server = start_server(root, "--model-control-mode", "explicit", "--load-model", "*")

    reply = load(server, name, parameters)

    assert reply.status == status, reply.body
    assert message in reply.json()["error"]
    assert "/tmp" not in reply.json()["error"]
    client = httpclient.InferenceServerClient(server.http_url)
    assert client.is_model_ready("scaled") and client.get_model_config("scaled")["max_batch_size"] == 8


def test_files_in_a_grpc_load_are_refused_as_triton_refuses_files_it_cannot_write(
    start_server: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    """What Triton's own simple_grpc_model_control.py example checks: INTERNAL and "failed to poll
    from model repository" for a file it cannot write (a name longer than the system allows); conch
    refuses every file so, and the server and the model go on. HTTP answers 400 (the test above)."""
    root = scaled_repository(tmp_path / "models")
    server = start_server(root, "--model-control-mode", "explicit", "--load-model", "*")
    client = grpcclient.InferenceServerClient(server.grpc_url)

    for files in ({"file:" + "A" * 256: b"a"}, {"file:1/model.onnx": b"not a model"}):
        with pytest.raises(InferenceServerException) as caught:
            client.load_model("scaled", config="{}", files=files)
        assert caught.value.status() == "StatusCode.INTERNAL"
        assert "failed to poll from model repository" in (caught.value.message() or "")
        assert "put the files in the repository" in (caught.value.message() or "")

    assert client.is_server_live() and client.is_model_ready("scaled")
    assert client.get_model_config("scaled").config.max_batch_size == 8
    assert (root / "scaled" / "1" / "model.onnx").read_bytes()[:4] != b"not "


def test_unload_of_an_unknown_model_is_a_404_and_none_mode_refuses_both(
    start_server: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    root = scaled_repository(tmp_path / "models")
    explicit = start_server(root, "--model-control-mode", "explicit")
    fixed = start_server(root)

    unknown = explicit.request("POST", "/v2/repository/models/nothing/unload")
    refused = fixed.request("POST", "/v2/repository/models/scaled/load")
    with pytest.raises(InferenceServerException, match="explicit model load / unload is not allowed"):
        grpcclient.InferenceServerClient(fixed.grpc_url).unload_model("scaled")

    assert unknown.status == 404 and "Request for unknown model: 'nothing'" in unknown.json()["error"]
    assert refused.status == 503
    assert "--model-control-mode explicit" in refused.json()["error"]


def test_control_flags_that_cannot_work_together_are_refused(tmp_path: Path) -> None:
    import subprocess
    import sys

    root = scaled_repository(tmp_path / "models")
    for flags, wanted in [
        (["--model-control-mode", "poll", "--workers", "2"], "use it without --workers"),
        (["--load-model", "scaled"], "--load-model selects models in --model-control-mode explicit only"),
        (["--model-control-mode", "sometimes"], "expected one of none, poll, explicit"),
        (["--repository-poll-secs", "0"], "must be at least 1"),
    ]:
        done = subprocess.run(
            [sys.executable, "-m", "conch.cli.main", "serve", str(root), *flags],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2, (flags, done.stderr)
        assert wanted in done.stderr, (flags, done.stderr)


def test_sigterm_finishes_the_requests_in_flight_then_exits_cleanly(
    start_server: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    root = write_repository(tmp_path / "models", {"slow": (counting_loop_model(), "max_batch_size: 0")})
    server = start_server(root, "--exit-timeout-secs", "30")
    results: list[Any] = []

    def slow_request() -> None:
        client = httpclient.InferenceServerClient(server.http_url, network_timeout=60)
        request = httpclient.InferInput("ITERATIONS", [1, 1], "INT64")
        request.set_data_from_numpy(np.array([[300_000]], np.int64))
        try:
            results.append(client.infer("slow", [request]).as_numpy("COUNTED")[0, 0])
        except Exception as exc:
            results.append(exc)

    threads = [threading.Thread(target=slow_request) for _ in range(CLIENTS)]
    for thread in threads:
        thread.start()
    time.sleep(1.0)  # every request is in the server, queued behind the one instance
    assert server.process is not None
    server.process.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    during = server.request("GET", "/v2/health/ready")
    late = server.request("POST", "/v2/models/slow/infer", LATE_REQUEST)
    for thread in threads:
        thread.join(90)
    code = server.process.wait(90)

    assert during.status == 503 and "shutting down" in during.json()["error"]
    assert late.status == 503 and "server is shutting down" in late.json()["error"]
    assert results == [300_000.0] * CLIENTS
    assert code == 0
    with pytest.raises(ConnectionRefusedError):
        server.request("GET", "/v2/health/live")


def test_poll_mode_applies_a_changed_config_and_a_removed_model(
    start_server: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    root = scaled_repository(tmp_path / "models")
    server = start_server(root, "--model-control-mode", "poll", "--repository-poll-secs", "1")
    client = httpclient.InferenceServerClient(server.http_url)
    assert client.get_model_config("scaled")["max_batch_size"] == 8

    (root / "scaled" / "config.pbtxt").write_text(CONFIG.replace("max_batch_size: 8", "max_batch_size: 2"))
    deadline = time.monotonic() + 30
    while client.get_model_config("scaled")["max_batch_size"] != 2:
        assert time.monotonic() < deadline, server.log()[-2000:]
        time.sleep(0.1)
    shutil.rmtree(root / "other")
    while any(e["name"] == "other" for e in index(server)):
        assert time.monotonic() < deadline, index(server)
        time.sleep(0.1)

    assert client.is_model_ready("scaled")
    assert server.request("GET", "/v2/models/other").status == 404
