"""``conch serve --proxies N``: proxy processes own the ports, one model process the models.

Each test runs a real server with two proxy processes and talks to it with tritonclient over
fresh connections, so requests land on both proxies (the kernel spreads connections over the
processes sharing a port). What one process did for ``--workers`` it could not (model control,
shared memory, sequences, a server-wide rate limit) must work here, because all of it lives in the
one model process; and results must be what onnxruntime computes.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from onnx import TensorProto
from tritonclient.utils import InferenceServerException

from conch.core.usable_cores import usable_cores
from conch.runtime.proxy_count import auto_proxies
from tests.fixtures import python_models
from tests.fixtures.onnx_models import identity_model, variable_dims_model, write_repository
from tests.fixtures.sequence_models import accumulator_config, accumulator_model
from tests.integration.server_process import ServerProcess, free_port, processes_running, requests_counted

FRONTENDS = ("--proxies", "2")
BODY_LIMIT = 1 << 20


def batched_config(name: str, max_batch_size: int, delay_us: int) -> str:
    """A dynamically batched ``variable_dims_model``'s config."""
    return f"""
name: "{name}"
max_batch_size: {max_batch_size}
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ -1 ] }} ]
dynamic_batching {{ max_queue_delay_microseconds: {delay_us} }}
"""


#: A Python model that sleeps 50 ms an execution: the rows that come meanwhile form the next batch,
#: on a fast machine as on a loaded one (an ONNX relu answered each request before the next client
#: had connected, and ran 37 batches for 64 requests).
BATCHED = python_models.ONE_IN_ONE_OUT.format(
    name="batched", max_batch_size=64, dtype="TYPE_FP32", instances=1, extra="dynamic_batching { }"
)


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = write_repository(
        tmp_path_factory.mktemp("proxies"),
        {
            "relu": (variable_dims_model(), None),
            "identity": (identity_model(TensorProto.FLOAT), None),
            "acc": (accumulator_model(TensorProto.UINT64), accumulator_config("acc")),
        },
    )
    python_models.write_python_model(root, "batched", BATCHED, python_models.PAUSED_ECHO)
    return root


@pytest.fixture(scope="module")
def server(start_server: Callable[..., ServerProcess], repository: Path) -> ServerProcess:
    return start_server(
        repository,
        *FRONTENDS,
        "--model-control-mode", "explicit",
        "--load-model", "*",
        "--http-max-body-bytes", str(BODY_LIMIT),
    )  # fmt: skip


def relu(x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(
        variable_dims_model().SerializeToString(), providers=["CPUExecutionProvider"]
    )
    return np.asarray(session.run(["Y"], {"X": x})[0])


def proxy_pids(server: ServerProcess) -> list[int]:
    """The proxy processes of ``server`` (they run in sessions of their own, so by command line)."""
    return processes_running(b"conch.runtime.proxy", str(server.http_port).encode())


def cpu_ns(pid: int) -> int:
    """Nanoseconds process ``pid`` has run on a CPU (``/proc/PID/schedstat``, finer than ticks)."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])


def http_relu(server: ServerProcess, x: np.ndarray, binary: bool) -> np.ndarray:
    client = httpclient.InferenceServerClient(server.http_url)  # a connection of its own
    try:
        tensor = httpclient.InferInput("X", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x, binary_data=binary)
        output = httpclient.InferRequestedOutput("Y", binary_data=binary)
        return np.asarray(client.infer("relu", [tensor], outputs=[output]).as_numpy("Y"))
    finally:
        client.close()


def grpc_relu(server: ServerProcess, x: np.ndarray) -> np.ndarray:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        tensor = grpcclient.InferInput("X", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        return np.asarray(client.infer("relu", [tensor]).as_numpy("Y"))
    finally:
        client.close()


def test_two_proxy_processes_share_the_ports(server: ServerProcess) -> None:
    assert len(proxy_pids(server)) == 2
    assert server.request("GET", "/v2/health/ready").status == 200


@pytest.mark.parametrize("width", [4, 5000])  # inside the message, and through a shared-memory segment
def test_answers_are_what_onnxruntime_computes_over_every_protocol(server: ServerProcess, width: int) -> None:
    rng = np.random.default_rng(width)
    for _ in range(6):  # fresh connections: both proxies answer some
        x = rng.standard_normal((3, width)).astype(np.float32)
        wanted = relu(x)
        np.testing.assert_array_equal(http_relu(server, x, binary=False), wanted)
        np.testing.assert_array_equal(http_relu(server, x, binary=True), wanted)
        np.testing.assert_array_equal(grpc_relu(server, x), wanted)


def test_requests_through_both_proxies_form_whole_batches(server: ServerProcess) -> None:
    def one(index: int) -> bool:
        x = np.full((1, 8), float(index), np.float32)
        protocol: Any = grpcclient if index % 2 else httpclient
        client = protocol.InferenceServerClient(server.grpc_url if index % 2 else server.http_url)
        try:
            tensor = protocol.InferInput("IN", [1, 8], "FP32")
            tensor.set_data_from_numpy(x)
            return bool(np.array_equal(client.infer("batched", [tensor]).as_numpy("OUT"), x))
        finally:
            client.close()

    before = {pid: cpu_ns(pid) for pid in proxy_pids(server)}
    with ThreadPoolExecutor(16) as pool:
        assert all(pool.map(one, range(64)))  # each client got its own row back
    # Each proxy ran for at least a millisecond meanwhile: both took some of the 64 connections.
    assert all(cpu_ns(pid) - spent > 1_000_000 for pid, spent in before.items()), before
    stats = server.request("GET", "/v2/models/batched/stats").json()["model_stats"][0]
    assert stats["inference_count"] == 64
    assert stats["execution_count"] < 64 / 2, stats  # rows from many connections ran together


def test_model_control_works_through_any_proxy(server: ServerProcess) -> None:
    x = np.ones((1, 4), np.float32)
    grpc_client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        grpc_client.unload_model("relu")
        with pytest.raises(InferenceServerException) as caught:
            http_relu(server, x, binary=False)
        assert caught.value.status() == "503"  # as one process answers an unloaded model
        assert "model 'relu' has no ready version" in str(caught.value.message())
        httpclient.InferenceServerClient(server.http_url).load_model("relu")
        np.testing.assert_array_equal(grpc_relu(server, x), relu(x))
    finally:
        grpc_client.close()


def test_shared_memory_registered_on_one_connection_serves_another(server: ServerProcess) -> None:
    x = np.arange(-8, 8, dtype=np.float32).reshape(2, 8)
    key = f"/conch-proxies-{os.getpid()}"
    region = shm.create_shared_memory_region("fe-region", key, 2 * x.nbytes)
    http_client = httpclient.InferenceServerClient(server.http_url)
    grpc_client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        shm.set_shared_memory_region(region, [x])
        http_client.register_system_shared_memory("fe-region", key, 2 * x.nbytes)
        tensor = grpcclient.InferInput("X", [2, 8], "FP32")
        tensor.set_shared_memory("fe-region", x.nbytes)
        output = grpcclient.InferRequestedOutput("Y")
        output.set_shared_memory("fe-region", x.nbytes, offset=x.nbytes)
        grpc_client.infer("relu", [tensor], outputs=[output])
        got = shm.get_contents_as_numpy(region, np.float32, [2, 8], offset=x.nbytes)
        np.testing.assert_array_equal(got, relu(x))
        status = grpc_client.get_system_shared_memory_status("fe-region", as_json=True)
        assert status["regions"]["fe-region"]["byte_size"] == str(2 * x.nbytes)
    finally:
        http_client.unregister_system_shared_memory()
        shm.destroy_shared_memory_region(region)
        http_client.close()
        grpc_client.close()


def test_a_sequence_keeps_its_state_across_connections(server: ServerProcess) -> None:
    total = 0.0
    for index, value in enumerate([3.0, 4.0, 5.0, 6.0]):
        total += value
        client = (httpclient if index % 2 else grpcclient).InferenceServerClient(
            server.http_url if index % 2 else server.grpc_url
        )
        module = httpclient if index % 2 else grpcclient
        tensor = module.InferInput("INPUT", [1, 1], "FP32")
        tensor.set_data_from_numpy(np.full([1, 1], value, np.float32))
        result = client.infer(
            "acc", [tensor], sequence_id=77, sequence_start=index == 0, sequence_end=index == 3
        ).as_numpy("OUTPUT")
        client.close()
        assert float(result.reshape(-1)[0]) == total


def test_a_bad_request_gets_the_same_answer_as_in_one_process(server: ServerProcess) -> None:
    body = b'{"inputs":[{"name":"X","datatype":"FP32","shape":[1,4],"data":[1,2,3]}]}'
    unknown = server.request("POST", "/v2/models/no-such-model/infer", body)
    assert unknown.status == 404 and "no-such-model" in unknown.json()["error"]
    short = server.request("POST", "/v2/models/relu/infer", body)
    assert short.status == 400 and "needs 4 elements" in short.json()["error"]
    # Bytes that are no ModelInferRequest: parsed, and refused, in the model process.
    with grpc.insecure_channel(server.grpc_url) as channel, pytest.raises(grpc.RpcError) as caught:
        channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")(b"\xff\xff\xff", timeout=10)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "inference.ModelInferRequest" in caught.value.details()
    assert server.request("GET", "/v2/health/live").status == 200


def test_a_body_over_the_limit_is_refused_by_the_proxy_and_counted(server: ServerProcess) -> None:
    before = requests_counted(server, "http", "413")
    head = f"POST /v2/models/relu/infer HTTP/1.1\r\nHost: x\r\nContent-Length: {BODY_LIMIT + 1}\r\n\r\n"
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=10) as sock:
        sock.sendall(head.encode() + b"[")  # the rest never comes: the declared length is refused
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 413 ") and b"--http-max-body-bytes" in answer
    # The proxy answered on its own; the model process counts the answer all the same.
    deadline = time.monotonic() + 5
    while requests_counted(server, "http", "413") < before + 1:
        assert time.monotonic() < deadline, "the proxy's refusal was not counted"
        time.sleep(0.05)
    assert http_relu(server, np.ones((1, 4), np.float32), binary=False).tolist() == [[1, 1, 1, 1]]


def test_refused_with_workers(repository: Path, tmp_path: Path) -> None:
    refused = ServerProcess(repository, [*FRONTENDS, "--workers", "2"])
    with pytest.raises(RuntimeError):
        refused.start(tmp_path, timeout=30)
    assert refused.process is not None and refused.process.returncode == 2
    assert "--proxies replaces --workers; use one of them" in refused.log()


def test_the_retired_grpc_relay_flag_is_ignored_with_a_warning(repository: Path, tmp_path: Path) -> None:
    server = ServerProcess(repository, [*FRONTENDS], env={"CONCH_GRPC_RELAY": "true"}).start(tmp_path)
    try:
        assert "--grpc-relay (CONCH_GRPC_RELAY) is retired and ignored" in server.log()
        assert http_relu(server, np.array([[-1, 2]], np.float32), binary=True).tolist() == [[0, 2]]
        with grpcclient.InferenceServerClient(server.grpc_url) as client:
            assert client.is_model_ready("relu")
    finally:
        server.stop()


def test_by_default_the_cores_choose_and_workers_still_start(repository: Path, tmp_path: Path) -> None:
    """No --proxies: ``auto``, as many as this machine's usable cores allow (none under 8), said in
    the log; beside --workers, where an explicit count is refused, auto quietly starts none."""
    expected = auto_proxies(usable_cores())
    default = ServerProcess(repository, []).start(tmp_path)
    try:
        assert f"proxy processes: {expected} (auto:" in default.log()
        assert http_relu(default, np.array([[-1, 2]], np.float32), binary=True).tolist() == [[0, 2]]
    finally:
        default.stop()
    plain = write_repository(tmp_path / "plain", {"relu": (variable_dims_model(), None)})  # no sequences
    workers = ServerProcess(plain, ["--workers", "2"]).start(tmp_path)
    try:
        assert "proxy processes: 0 (auto: --workers serve the ports instead)" in workers.log()
        assert http_relu(workers, np.array([[3, -3]], np.float32), binary=False).tolist() == [[3, 0]]
    finally:
        workers.stop()


def test_by_default_eight_usable_cores_start_eight_proxies(repository: Path, tmp_path: Path) -> None:
    """The default on a larger machine, end to end. Only the core count is staged: a
    ``sitecustomize`` makes the affinity mask say 8 cores; the server, its proxies and the
    clients are real, and requests from fresh connections are answered through them."""
    (tmp_path / "sitecustomize.py").write_text(
        "import os\nos.sched_getaffinity = lambda pid: set(range(8))\n"
    )
    server = ServerProcess(repository, [], env={"PYTHONPATH": str(tmp_path)}).start(tmp_path)
    try:
        assert "proxy processes: 8 (auto: 8 usable cores" in server.log()
        proxies = processes_running(b"conch.runtime.proxy", str(server.http_port).encode())
        assert len(proxies) == 8
        x = np.array([[-2, 5]], np.float32)
        for _ in range(4):  # fresh connections, spread over the proxies by the kernel
            assert http_relu(server, x, binary=False).tolist() == [[0, 5]]
            assert grpc_relu(server, x).tolist() == [[0, 5]]
    finally:
        server.stop()


def test_a_taken_port_is_named(repository: Path) -> None:
    import socket
    import subprocess
    import sys

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ports = [
            "--http-port",
            str(free_port()),
            "--grpc-port",
            str(port),
            "--metrics-port",
            str(free_port()),
        ]
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "conch.cli.main",
                "serve",
                str(repository),
                "--host",
                "127.0.0.1",
                *ports,
                *FRONTENDS,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 1
    assert f"conch: cannot listen on 127.0.0.1:{port} (gRPC)" in done.stderr
    assert "--grpc-port N (or CONCH_GRPC_PORT=N)" in done.stderr
    assert "went away" not in done.stderr  # one clear message, not one per proxy


def test_the_rate_limit_holds_across_proxies(repository: Path, tmp_path: Path) -> None:
    limited = ServerProcess(repository, [*FRONTENDS, "--client-rate-limit", "0.1", "--client-burst", "3"])
    limited.start(tmp_path)
    try:
        body = b'{"inputs":[{"name":"X","datatype":"FP32","shape":[1,4],"data":[1,2,3,4]}]}'
        codes = [
            limited.request("POST", "/v2/models/relu/infer", body, {"x-client-id": "one"}).status
            for _ in range(8)
        ]
        assert codes[:3] == [200, 200, 200] and set(codes[3:]) == {429}, codes
    finally:
        assert limited.stop() == 0


def test_a_proxy_that_dies_stops_the_server_with_an_error(repository: Path, tmp_path: Path) -> None:
    doomed = ServerProcess(repository, list(FRONTENDS))
    doomed.start(tmp_path)
    pids = proxy_pids(doomed)
    assert len(pids) == 2
    os.kill(pids[0], signal.SIGKILL)
    assert doomed.process is not None
    doomed.process.wait(30)
    assert doomed.process.returncode == 1
    assert "a proxy process exited" in doomed.log()
    deadline = time.monotonic() + 10
    while proxy_pids(doomed) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert proxy_pids(doomed) == []


def test_stopping_leaves_no_processes_and_no_shared_memory(repository: Path, tmp_path: Path) -> None:
    served = ServerProcess(repository, list(FRONTENDS))
    served.start(tmp_path)
    x = np.ones((2, 5000), np.float32)  # through segments, both ways
    np.testing.assert_array_equal(grpc_relu(served, x), x)
    pids = [served.process.pid, *proxy_pids(served)]  # type: ignore[union-attr]
    assert served.stop() == 0
    assert proxy_pids(served) == []
    prefixes = [f"conch-m{pids[0]}-", *(f"conch-f{pid}-" for pid in pids[1:])]
    assert [p.name for p in Path("/dev/shm").iterdir() if p.name.startswith(tuple(prefixes))] == []


#: Its batch runs when it holds 8 rows (or after 2 s).
FULL_BATCH = batched_config("full_batch", 8, 2_000_000)


def test_the_model_process_polls_after_a_lone_request_only(tmp_path: Path) -> None:
    """Behind proxies the model process empties between their messages even under load, so it polls
    (``--busy-poll-us``) only after a request that was alone. Polling shows as the event loop's thread
    staying runnable: on a machine loaded by other work it may get little CPU, but it never sleeps."""
    repository = write_repository(tmp_path / "repo", {"full_batch": (variable_dims_model(), FULL_BATCH)})
    polling = ServerProcess(repository, ["--proxies", "1", "--busy-poll-us", "1500000"])
    polling.start(tmp_path)
    assert polling.process is not None
    model_process = polling.process.pid

    def infer(_: int = 0) -> int:
        body = b'{"inputs":[{"name":"X","datatype":"FP32","shape":[1,4],"data":[1,2,3,4]}]}'
        return polling.request("POST", "/v2/models/full_batch/infer", body).status

    def runnable_over_half_a_second() -> float:
        """The share of 50 looks at the loop's thread (the process's main one) that found it runnable."""
        states = []
        for _ in range(50):
            stat = Path(f"/proc/{model_process}/stat").read_text()
            states.append(stat.rpartition(")")[2].split()[0])
            time.sleep(0.01)
        return states.count("R") / len(states)

    try:
        # Eight requests at once: the batch runs when it is full, so all eight are inside together.
        with ThreadPoolExecutor(8) as pool:
            assert list(pool.map(infer, range(8))) == [200] * 8
        after_busy = runnable_over_half_a_second()
        time.sleep(1.5)  # any window (the proxy's own) has closed
        assert infer() == 200  # alone, it waits out the delay: 2 s
        after_lone = runnable_over_half_a_second()
    finally:
        assert polling.stop() == 0
    assert after_busy < 0.2, f"polled after eight requests at once: runnable in {after_busy:.0%} of looks"
    assert after_lone > 0.8, f"did not poll after a lone request: runnable in {after_lone:.0%} of looks"
