"""``--backend-config python,shm-*-byte-size``: the segments Python models' tensors cross in start at
the default size and grow by the growth step for bigger batches; a bad entry stops ``conch serve``."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.fixtures import python_models as models
from tests.integration.server_process import ServerProcess, conch_command

SMALL = 64 * 1024


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("python-shm")
    config = models.ONE_IN_ONE_OUT.format(
        name="echo", max_batch_size=0, dtype="TYPE_FP32", instances=1, extra=""
    )
    models.write_python_model(root, "echo", config, models.SLEEPY)
    return root


@pytest.fixture(scope="module")
def server(start_server: Callable[..., ServerProcess], repository: Path) -> ServerProcess:
    return start_server(
        repository,
        "--backend-config",
        f"python,shm-default-byte-size={SMALL}",
        env={"CONCH_BACKEND_CONFIG": f"python,shm-growth-byte-size={SMALL}"},
    )


def _segments(server: ServerProcess) -> dict[str, int]:
    assert server.process is not None
    return {p.name: p.stat().st_size for p in Path("/dev/shm").glob(f"conch-{server.process.pid}-*")}


def test_segments_grow_in_steps_for_a_big_tensor(
    server: ServerProcess, grpc_client: grpcclient.InferenceServerClient
) -> None:
    small = np.zeros(16, dtype=np.float32)  # sleeps 0 ms
    big = np.arange(300_000, dtype=np.float32)
    big[0] = 0
    for value in (small, big):
        tensor = grpcclient.InferInput("IN", list(value.shape), "FP32")
        tensor.set_data_from_numpy(value)
        np.testing.assert_array_equal(grpc_client.infer("echo", [tensor]).as_numpy("OUT"), value)
    sizes = sorted(_segments(server).values())
    assert sizes and sizes[0] == SMALL  # the small request's segments are the default size
    assert max(sizes) >= big.nbytes and all(size % SMALL == 0 for size in sizes)  # grown by whole steps


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ("onnxruntime,shm-default-byte-size=65536", "python backend only"),
        ("python,shm-size=65536", "has no setting 'shm-size'"),
        ("python,shm-default-byte-size=12", "at least 4096"),
    ],
)
def test_a_bad_backend_config_stops_serve(entry: str, says: str, repository: Path) -> None:
    finished = subprocess.run(
        [conch_command(), "serve", str(repository), "--backend-config", entry],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert finished.returncode == 2
    assert says in finished.stderr


def test_a_relative_repository_path_serves_python_models(
    start_server: Callable[..., ServerProcess], repository: Path
) -> None:
    relative = Path(os.path.relpath(repository, Path.cwd()))
    assert not relative.is_absolute()
    served = start_server(relative)
    index = served.request("POST", "/v2/repository/index").json()
    assert [(e["name"], e["state"]) for e in index] == [("echo", "READY")]
