"""``conch serve`` flags that no capability file sets: each test's outcome depends on the flags' values,
so it fails if a flag (or its ``CONCH_*`` variable) is ignored and its default used instead.

The circuit breaker's server-wide defaults (``--circuit-breaker`` and ``--circuit-breaker-*``,
docs/lifecycle.md): the models' configs set no ``circuit_breaker.*`` key, so the flags alone decide.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fixtures.onnx_models import counting_loop_model, reshape_model, write_repository
from tests.integration.metrics_scrape import scrape
from tests.integration.server_process import ServerProcess

CLOSED, OPEN, HALF_OPEN = 0.0, 1.0, 2.0


def reshape_status(server: ServerProcess, shape: list[int]) -> int:
    """Reshape X [4] to ``shape``: [2, 2] answers 200, [3, 3] fails while running (500)."""
    body = {
        "inputs": [
            {"name": "X", "shape": [4], "datatype": "FP32", "data": [0, 1, 2, 3]},
            {"name": "SHAPE", "shape": [2], "datatype": "INT64", "data": shape},
        ]
    }
    return server.request("POST", "/v2/models/target-shape/infer", json.dumps(body).encode()).status


def count_status(server: ServerProcess, turns: int) -> int:
    """One request to the counting loop: about 1 us a turn."""
    body = {"inputs": [{"name": "ITERATIONS", "shape": [1, 1], "datatype": "INT64", "data": [turns]}]}
    return server.request("POST", "/v2/models/counter/infer", json.dumps(body).encode()).status


def circuit_state(server: ServerProcess, model: str) -> float:
    return scrape(server.metrics_url).value("conch_circuit_state", model=model, version="1")


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_repository(
        tmp_path_factory.mktemp("flags") / "models",
        {"target-shape": (reshape_model(), None), "counter": (counting_loop_model(), None)},
    )


def test_breaker_flags_set_every_models_window_threshold_open_time_and_probes(
    start_server: Callable[..., ServerProcess], repository: Path
) -> None:
    server = start_server(
        repository,
        "--circuit-breaker",
        "true",
        "--circuit-breaker-config",
        "window_calls=2,minimum_calls=2,failure_rate_threshold=1.0,open_seconds=1,half_open_calls=2",
    )
    good, bad = [2, 2], [3, 3]

    # Half the window failed: below the 1.0 threshold (the default 0.5 would open it).
    closed = [reshape_status(server, shape) for shape in (bad, good, good, bad)]
    state_after_half = circuit_state(server, "target-shape")
    # The window is the last 2 calls: [bad, bad] (over the default 100 the rate would be 3 in 5).
    opened_by = reshape_status(server, bad)
    refused = reshape_status(server, good)
    state_open = circuit_state(server, "target-shape")
    time.sleep(1.2)  # the 1 s open time (the default is 30 s)
    first_probe = reshape_status(server, good)
    state_after_one_probe = circuit_state(server, "target-shape")
    second_probe = reshape_status(server, good)

    assert closed == [500, 200, 200, 500]
    assert state_after_half == CLOSED
    assert (opened_by, refused, state_open) == (500, 503, OPEN)
    assert first_probe == 200
    assert state_after_one_probe == HALF_OPEN, "2 probes: the breaker waits for the second"
    assert second_probe == 200
    assert circuit_state(server, "target-shape") == CLOSED


def test_the_deprecated_breaker_flags_and_variables_still_work_with_a_warning(
    start_server: Callable[..., ServerProcess], repository: Path
) -> None:
    server = start_server(
        repository,
        "--circuit-breaker-slow-call-ms",
        "50",
        "--circuit-breaker-slow-call-rate-threshold",
        "0.5",
        env={"CONCH_CIRCUIT_BREAKER": "true", "CONCH_CIRCUIT_BREAKER_MINIMUM_CALLS": "2"},
    )

    quick = count_status(server, 1)
    # About 0.3 s, past 50 ms (by default no call is slow): half the window is slow, at the 0.5
    # threshold (the default 1.0 would need both calls slow).
    slow = count_status(server, 300_000)
    refused = count_status(server, 1)

    assert (quick, slow) == (200, 200)
    assert refused == 503, "a slow half of the window opens the circuit"
    assert circuit_state(server, "counter") == OPEN
    assert circuit_state(server, "target-shape") == CLOSED, "each model has its own breaker"
    assert "the --circuit-breaker-* flags are deprecated" in server.log()
    named = "minimum_calls=2,slow_call_ms=50,slow_call_rate_threshold=0.5"
    assert f"write --circuit-breaker-config {named}" in server.log()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("open_secs=10", "--circuit-breaker-config: unknown key 'open_secs'; did you mean 'open_seconds'"),
        ("minimum_calls=500", "'minimum_calls' (500) must be at most 'window_calls' (100)"),
        ("open_seconds", "expected KEY=VALUE pairs joined by commas"),
        ("window_calls=many", "'window_calls' must be a whole number, got 'many'"),
    ],
)
def test_a_bad_breaker_config_stops_the_server_naming_the_key(
    repository: Path, tmp_path: Path, value: str, message: str
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "conch.cli.main", "serve", str(repository), "--circuit-breaker-config", value],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )

    assert done.returncode == 2
    assert message in done.stderr
