"""Python models that call other models (BLS, sync and async, to ONNX and Python models), decoupled
models streaming over gRPC and the generate extension, and models with an environment of their own
(``EXECUTION_ENV_PATH``)."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import queue
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conch.backends.python.stub import conch_ipc
from tests.fixtures import ensembles
from tests.fixtures import python_models as models
from tests.fixtures.onnx_models import add_sub_model, write_repository
from tests.integration.server_process import ServerProcess

ONLY_IN_ENV = "def triple(values):\n    return values * 3\n"


def _environment(root: Path) -> Path:
    """A venv of its own: numpy (copied from the server's environment) and ``only_in_env``, which the
    server's environment does not have."""
    env = root / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    site = Path(sysconfig.get_path("purelib", vars={"base": str(env), "platbase": str(env)}))
    server_site = Path(np.__file__).parents[1]
    for name in ("numpy", "numpy.libs"):
        if (server_site / name).exists():
            shutil.copytree(server_site / name, site / name, symlinks=True)
    (site / "only_in_env.py").write_text(ONLY_IN_ENV)
    return env


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("python-calls")
    write_repository(root, {"onnx_add_sub": (add_sub_model(), None)})
    models.write_python_model(
        root,
        "py_add_sub",
        models.ADD_SUB_CONFIG.format(name="py_add_sub", delay_us=0, instances=1),
        models.ADD_SUB,
    )
    models.write_python_model(root, "bls_sync", models.BLS_CONFIG.format(name="bls_sync"), models.BLS_SYNC)
    models.write_python_model(root, "bls_async", models.BLS_CONFIG.format(name="bls_async"), models.BLS_ASYNC)
    sleepy = models.ONE_IN_ONE_OUT.format(
        name="sleepy", max_batch_size=0, dtype="TYPE_FP32", instances=1, extra=""
    )
    models.write_python_model(root, "sleepy", sleepy, models.SLEEPY)
    slow = models.ADD_SUB.replace("        responses = []", "        time.sleep(0.5)\n        responses = []")
    models.write_python_model(
        root,
        "slow_add_sub",
        models.ADD_SUB_CONFIG.format(name="slow_add_sub", delay_us=0, instances=1),
        "import time\n" + slow,
    )
    decoupled = models.ONE_IN_ONE_OUT.format(
        name="repeat",
        max_batch_size=0,
        dtype="TYPE_INT32",
        instances=1,
        extra="model_transaction_policy { decoupled: true }",
    )
    models.write_python_model(root, "repeat", decoupled, models.REPEAT)
    models.write_python_model(root, "bls_decoupled", models.BLS_DECOUPLED_CONFIG, models.BLS_DECOUPLED)
    mixed = ensembles.ensemble_config(
        "mixed",
        [("A", "TYPE_FP32", [16]), ("B", "TYPE_FP32", [16])],
        [("TWICE_A", "TYPE_FP32", [16]), ("TWICE_B", "TYPE_FP32", [16])],
        [
            ("py_add_sub", {"INPUT0": "A", "INPUT1": "B"}, {"OUTPUT0": "SUM", "OUTPUT1": "DIFF"}),
            (
                "onnx_add_sub",
                {"INPUT0": "SUM", "INPUT1": "DIFF"},
                {"OUTPUT0": "TWICE_A", "OUTPUT1": "TWICE_B"},
            ),
        ],
        max_batch_size=4,
    )
    ensembles.write_ensemble(root, "mixed", mixed)
    models.write_python_model(root, "bls_batched", models.BLS_BATCHED_CONFIG, models.BLS_BATCHED)
    env = _environment(root)
    with tarfile.open(root / "env.tar.gz", "w:gz") as tar:
        tar.add(env, arcname=".")
    for name, where in (("env_dir", str(env)), ("env_packed", "$$TRITON_MODEL_DIRECTORY/../env.tar.gz")):
        extra = f'parameters {{ key: "EXECUTION_ENV_PATH" value: {{ string_value: "{where}" }} }}'
        config = models.ONE_IN_ONE_OUT.format(
            name=name, max_batch_size=0, dtype="TYPE_FP32", instances=1, extra=extra
        )
        models.write_python_model(root, name, config, models.ENV_ONLY)
    return root


@pytest.fixture(scope="module")
def server(
    start_server: Callable[..., ServerProcess], repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> ServerProcess:
    cache = tmp_path_factory.mktemp("cache")
    return start_server(repository, env={"CONCH_CACHE_DIR": str(cache)})


def _bls_inputs(target: str, timeout_us: int = 0) -> list[httpclient.InferInput]:
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    values = {
        "MODEL": np.array([target.encode()], dtype=object),
        "INPUT0": a,
        "INPUT1": np.ones_like(a),
        "TIMEOUT_US": np.array([timeout_us], dtype=np.int64),
    }
    datatypes = {"MODEL": "BYTES", "INPUT0": "FP32", "INPUT1": "FP32", "TIMEOUT_US": "INT64"}
    inputs = []
    for name, value in values.items():
        tensor = httpclient.InferInput(name, list(value.shape), datatypes[name])
        tensor.set_data_from_numpy(value)
        inputs.append(tensor)
    return inputs


@pytest.mark.parametrize("caller", ["bls_sync", "bls_async"])
@pytest.mark.parametrize("callee", ["onnx_add_sub", "py_add_sub"])
def test_bls_calls_onnx_and_python_models(
    caller: str, callee: str, http_client: httpclient.InferenceServerClient
) -> None:
    before = http_client.get_inference_statistics(callee)["model_stats"][0].get("inference_count", 0)
    result = http_client.infer(caller, _bls_inputs(callee))
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + 1)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - 1)
    after = http_client.get_inference_statistics(callee)["model_stats"][0]["inference_count"]
    assert after - before == (2 if caller == "bls_async" else 1)  # the calls went through the callee


@pytest.mark.parametrize("caller", ["bls_sync", "bls_async"])
def test_bls_to_an_unknown_model_is_an_error_not_a_hang(
    caller: str, http_client: httpclient.InferenceServerClient
) -> None:
    with pytest.raises(InferenceServerException) as failed:
        http_client.infer(caller, _bls_inputs("no_such_model"))
    assert failed.value.status() == "404"  # the callee's NOT_FOUND, passed on with its code
    assert "Request for unknown model: 'no_such_model' is not found" in failed.value.message()


def test_bls_timeout_is_honoured(http_client: httpclient.InferenceServerClient) -> None:
    started = time.monotonic()
    with pytest.raises(InferenceServerException) as failed:
        http_client.infer("bls_sync", _bls_inputs("slow_add_sub", timeout_us=50_000))
    assert time.monotonic() - started < 0.45  # the caller did not wait for the 0.5 s callee
    assert failed.value.status() == "503"
    assert "BLS request to model 'slow_add_sub' timed out after 50000 us" in failed.value.message()
    assert http_client.infer("bls_sync", _bls_inputs("slow_add_sub")).as_numpy("OUTPUT0") is not None


def test_decoupled_model_streams_over_grpc(grpc_client: grpcclient.InferenceServerClient) -> None:
    answers: queue.Queue[tuple[object, object]] = queue.Queue()
    grpc_client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        tensor = grpcclient.InferInput("IN", [4], "INT32")
        tensor.set_data_from_numpy(np.array([5, 6, -1, 7], dtype=np.int32))
        grpc_client.async_stream_infer("repeat", [tensor], request_id="r1", enable_empty_final_response=True)
        values, errors = [], []
        while True:
            result, error = answers.get(timeout=10)
            if error is not None:
                errors.append(str(error))
                continue
            assert result is not None
            final = result.get_response().parameters["triton_final_response"].bool_param  # type: ignore[attr-defined]
            if final:
                break
            values.append(int(result.as_numpy("OUT")[0]))  # type: ignore[attr-defined]
    finally:
        grpc_client.stop_stream()
    assert values == [5, 6, 7]
    assert errors and "negative value" in errors[0]


def test_decoupled_model_is_refused_by_plain_infer(
    http_client: httpclient.InferenceServerClient, grpc_client: grpcclient.InferenceServerClient
) -> None:
    tensor = httpclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([1], dtype=np.int32))
    with pytest.raises(InferenceServerException) as http_failed:
        http_client.infer("repeat", [tensor])
    assert http_failed.value.message().startswith(
        "HTTP end point doesn't support models with decoupled transaction policy"
    )
    grpc_tensor = grpcclient.InferInput("IN", [1], "INT32")
    grpc_tensor.set_data_from_numpy(np.array([1], dtype=np.int32))
    with pytest.raises(InferenceServerException) as grpc_failed:
        grpc_client.infer("repeat", [grpc_tensor])
    assert (
        "ModelInfer RPC doesn't support models with decoupled transaction policy"
        in grpc_failed.value.message()
    )


def test_generate_stream_sends_server_sent_events(server: ServerProcess) -> None:
    reply = server.request("POST", "/v2/models/repeat/generate_stream", json.dumps({"IN": [3, 4]}).encode())
    assert reply.status == 200
    assert reply.headers["content-type"].startswith("text/event-stream")
    events = [json.loads(line[len(b"data: ") :]) for line in reply.body.split(b"\n\n") if line]
    assert [e["OUT"] for e in events] == [3, 4]
    assert events[0]["model_name"] == "repeat"


def test_generate_answers_once(server: ServerProcess) -> None:
    body = {"INPUT0": list(range(16)), "INPUT1": [1] * 16}
    reply = server.request("POST", "/v2/models/py_add_sub/generate", json.dumps(body).encode())
    assert reply.status == 200, reply.body
    document = reply.json()
    assert document["OUTPUT0"] == [float(v + 1) for v in range(16)]
    many = server.request("POST", "/v2/models/repeat/generate", json.dumps({"IN": [1, 2]}).encode())
    assert many.status == 400 and b"generate_stream" in many.body
    unknown = server.request("POST", "/v2/models/py_add_sub/generate", b'{"INPUT9": 1}')
    assert unknown.status == 400 and b"INPUT9" in unknown.body


@pytest.mark.parametrize("model", ["env_dir", "env_packed"])
def test_a_model_runs_in_its_own_environment(
    model: str, http_client: httpclient.InferenceServerClient
) -> None:
    assert importlib.util.find_spec("only_in_env") is None  # the server's environment lacks it
    tensor = httpclient.InferInput("IN", [2], "FP32")
    tensor.set_data_from_numpy(np.array([1.5, 2.0], dtype=np.float32))
    np.testing.assert_array_equal(http_client.infer(model, [tensor]).as_numpy("OUT"), [4.5, 6.0])


def _open_descriptors(server: ServerProcess) -> int:
    """The server's descriptors on shared memory segments (each mapping holds one)."""
    assert server.process is not None
    count = 0
    for fd in Path(f"/proc/{server.process.pid}/fd").iterdir():
        with contextlib.suppress(FileNotFoundError):  # closed while listed
            count += os.readlink(fd).startswith("/dev/shm/")
    return count


def test_concurrent_bls_callers_get_their_own_answers_and_leak_nothing(
    server: ServerProcess, repository: Path
) -> None:
    failures: list[str] = []

    def caller(seed: int) -> None:
        with httpclient.InferenceServerClient(server.http_url) as client:
            for _ in range(10):
                a = np.full((1, 16), seed, dtype=np.float32)
                tensor = httpclient.InferInput("INPUT0", [1, 16], "FP32")
                tensor.set_data_from_numpy(a)
                result = client.infer("bls_batched", [tensor])
                if not np.array_equal(result.as_numpy("OUTPUT0"), a + 1):
                    failures.append(f"seed {seed}")

    def burst() -> None:
        threads = [threading.Thread(target=caller, args=(seed,)) for seed in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    for _ in range(4):
        burst()
    assert failures == []
    # Segments come and go under concurrency; their mappings (a descriptor each) must go with them.
    # At rest, each instance keeps at most KEPT_FREE segments of its own and maps at most as many of
    # its process's (it held 545 after these bursts when the mappings of removed segments stayed).
    instances = len(list(repository.glob("*/1/model.py")))
    assert _open_descriptors(server) <= 2 * conch_ipc.KEPT_FREE * instances


def test_an_ensemble_mixes_python_and_onnx_steps(http_client: httpclient.InferenceServerClient) -> None:
    def count(model: str) -> int:
        return int(http_client.get_inference_statistics(model)["model_stats"][0].get("inference_count", 0))

    before = {m: count(m) for m in ("mixed", "py_add_sub", "onnx_add_sub")}
    a = np.arange(32, dtype=np.float32).reshape(2, 16)
    b = np.full((2, 16), 3, dtype=np.float32)
    inputs = [httpclient.InferInput("A", [2, 16], "FP32"), httpclient.InferInput("B", [2, 16], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    result = http_client.infer("mixed", inputs)
    np.testing.assert_array_equal(result.as_numpy("TWICE_A"), 2 * a)
    np.testing.assert_array_equal(result.as_numpy("TWICE_B"), 2 * b)
    assert {m: count(m) - n for m, n in before.items()} == {"mixed": 2, "py_add_sub": 2, "onnx_add_sub": 2}


def test_bls_to_a_decoupled_model_iterates_its_responses(
    http_client: httpclient.InferenceServerClient,
) -> None:
    tensor = httpclient.InferInput("IN", [4], "INT32")
    tensor.set_data_from_numpy(np.array([4, -2, 9, 1], dtype=np.int32))
    assert http_client.infer("bls_decoupled", [tensor]).as_numpy("OUT").tolist() == [4, -1, 9, 1]
