"""``GET /v2/health/deep`` on a real server (``docs/lifecycle.md``): every READY model answers a probe
inference, the event loop turns, memory is under its ratio; 503 names every failed check.

The slow model is :func:`counting_loop_model` whose warm-up sample counts to three million (about
2.5 s on the 2-core machine), probed with a 250 ms timeout: ten times the margin either way, so the
fast models beside it pass and the slow one fails however loaded the machine is.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto

from tests.fixtures.onnx_models import (
    counting_loop_model,
    fixed_shape_model,
    identity_model,
    string_model,
    variable_dims_model,
    write_repository,
)
from tests.integration.server_process import ServerProcess

SLOW_TURNS = 3_000_000

WARMED_CONFIG = """name: "warmed"
max_batch_size: 8
model_warmup [{
  name: "four_rows"
  batch_size: 4
  inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [4] random_data: true } }
}]
"""

SLOW_CONFIG = """name: "slow"
max_batch_size: 8
instance_group [{ count: 1 kind: KIND_CPU }]
model_warmup [{
  name: "long_count"
  batch_size: 1
  inputs { key: "ITERATIONS" value: { data_type: TYPE_INT64 dims: [1] input_data_file: "iterations" } }
}]
"""


def deep(server: ServerProcess) -> tuple[int, dict[str, Any]]:
    reply = server.request("GET", "/v2/health/deep")
    assert reply.headers["content-type"] == "application/json"
    return reply.status, reply.json()


def checks_by_name(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {check["name"]: check for check in document["checks"]}


def stats(server: ServerProcess, model: str) -> dict[str, Any]:
    found: dict[str, Any] = server.request("GET", f"/v2/models/{model}/stats").json()["model_stats"][0]
    return found


@pytest.fixture(scope="module")
def healthy_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_repository(
        tmp_path_factory.mktemp("deep-healthy") / "models",
        {
            "identity": (identity_model(TensorProto.FLOAT), None),
            "fixed": (fixed_shape_model(), None),  # no batch dimension
            "text": (string_model(), None),  # BYTES zeros are b""
            "dims": (variable_dims_model(), None),  # a -1 dim besides the batch dim
            "warmed": (identity_model(TensorProto.FLOAT), WARMED_CONFIG),
        },
    )


def test_a_healthy_server_answers_200_with_a_passing_check_per_ready_model(
    start_server: Callable[..., ServerProcess], healthy_repository: Path
) -> None:
    server = start_server(healthy_repository)

    status, document = deep(server)

    assert status == 200, document
    assert document["healthy"] is True
    assert document["failed"] == []
    checks = checks_by_name(document)
    models = ["dims/1", "fixed/1", "identity/1", "text/1", "warmed/1"]
    assert sorted(name for name in checks if name.startswith("model:")) == [f"model:{m}" for m in models]
    for name in ("event_loop", "host_memory", *(f"model:{m}" for m in models)):
        assert checks[name]["ok"] is True, checks[name]
        assert checks[name]["status"] == "pass"
        assert checks[name]["seconds"] >= 0
    assert str(healthy_repository) not in server.request("GET", "/v2/health/deep").body.decode()
    # A probe is one execution of one row (the first of the four-row warm-up sample), not a request.
    warmed = stats(server, "warmed")
    assert warmed["execution_count"] == 1
    assert warmed["inference_count"] == 1
    assert warmed["inference_stats"]["success"]["count"] == 0
    assert warmed["inference_stats"]["fail"]["count"] == 0


def test_calls_within_cache_secs_share_one_evaluation_and_one_probe(
    start_server: Callable[..., ServerProcess], healthy_repository: Path
) -> None:
    server = start_server(healthy_repository, "--health-cache-secs", "60")

    _, first = deep(server)
    _, second = deep(server)

    assert second["evaluation"] == first["evaluation"]
    assert second["evaluated_at"] == first["evaluated_at"]
    assert stats(server, "identity")["execution_count"] == 1


def test_with_cache_secs_0_every_call_evaluates_again(
    start_server: Callable[..., ServerProcess], healthy_repository: Path
) -> None:
    server = start_server(healthy_repository, "--health-cache-secs", "0")

    _, first = deep(server)
    _, second = deep(server)

    assert second["evaluation"] == first["evaluation"] + 1
    assert stats(server, "identity")["execution_count"] == 2


def test_a_model_slower_than_the_probe_timeout_makes_it_503_naming_that_model(
    start_server: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    root = write_repository(
        tmp_path / "models",
        {"slow": (counting_loop_model(), SLOW_CONFIG), "fast": (identity_model(TensorProto.FLOAT), None)},
    )
    (root / "slow" / "warmup").mkdir()
    (root / "slow" / "warmup" / "iterations").write_bytes(np.array([SLOW_TURNS], dtype="<i8").tobytes())
    server = start_server(root, "--health-probe-timeout-ms", "250")

    status, document = deep(server)

    assert status == 503, document
    assert document["healthy"] is False
    assert document["failed"] == ["model:slow/1"]
    checks = checks_by_name(document)
    assert checks["model:slow/1"]["ok"] is False
    assert checks["model:slow/1"]["detail"] == "no answer within 250 ms"
    assert checks["model:fast/1"]["ok"] is True
    assert server.request("GET", "/v2/health/ready").status == 200  # readiness stays as it was


def test_memory_over_its_ratio_makes_it_503_naming_host_memory(
    start_server: Callable[..., ServerProcess], healthy_repository: Path
) -> None:
    server = start_server(healthy_repository, "--health-max-memory-ratio", "0.0001")

    status, document = deep(server)

    assert status == 503
    assert document["failed"] == ["host_memory"]
    assert "limit 0.01%" in checks_by_name(document)["host_memory"]["detail"]


def test_a_model_with_no_ready_version_is_reported_but_does_not_fail_it(
    start_server: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    root = write_repository(
        tmp_path / "models",
        {
            "good": (identity_model(TensorProto.FLOAT), None),
            "broken": (identity_model(TensorProto.FLOAT), None),
        },
    )
    (root / "broken" / "1" / "model.onnx").write_bytes(b"not an onnx model")
    server = start_server(root)

    status, document = deep(server)

    assert status == 200, document
    checks = checks_by_name(document)
    assert checks["model:broken"]["status"] == "not_ready"
    assert checks["model:broken"]["ok"] is True
    assert checks["model:good/1"]["status"] == "pass"
    assert server.request("GET", "/v2/health/ready").status == 503  # readiness is what says it


def test_only_get_is_allowed(start_server: Callable[..., ServerProcess], healthy_repository: Path) -> None:
    server = start_server(healthy_repository)

    reply = server.request("POST", "/v2/health/deep")

    assert reply.status == 405
    assert "use GET" in reply.json()["error"]
    assert reply.headers["allow"] == "GET"


@pytest.mark.parametrize(
    ("flags", "environ", "message"),
    [
        (
            ["--health-probe-timeout-ms", "0"],
            {},
            "argument --health-probe-timeout-ms: must be at least 1, got 0",
        ),
        (["--health-cache-secs", "-1"], {}, "argument --health-cache-secs: must be at least 0, got -1"),
        (["--health-max-memory-ratio", "0"], {}, "argument --health-max-memory-ratio: must be above 0"),
        (["--health-max-memory-ratio", "1.5"], {}, "must be above 0 and at most 1, got 1.5"),
        (
            ["--health-max-gpu-memory-ratio", "most"],
            {},
            "expected a number above 0 and at most 1, got 'most'",
        ),
        ([], {"CONCH_HEALTH_MAX_GPU_MEMORY_RATIO": "2"}, "argument --health-max-gpu-memory-ratio: must be"),
    ],
)
def test_a_bad_health_flag_exits_2(flags: list[str], environ: dict[str, str], message: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "conch.cli.main", "serve", *flags],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **environ},
    )

    assert done.returncode == 2
    assert message in done.stderr
