"""Four releases under load from 32 tritonclient clients (half HTTP, half gRPC), with steps of seconds.

- a re-export of the baseline is promoted through 5 -> 50 -> a pause step -> 100;
- a candidate whose predictions flip on about half of the inputs is rolled back on agreement;
- a candidate many times slower is rolled back on P95, and its shadow copies overflow and are dropped;
- a candidate that fails on about a tenth of the inputs is rolled back on its error rate.

The failing candidates are released behind a shadow step of weight 0 first, so clients never get their
answers: every case must end with 0 failed client requests, and every answer a client got must be its
own input (what the baseline computes), whichever version answered. Each release's timeline is printed
(``pytest -s``) with its counts.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from tests.fixtures.onnx_models import (
    scale_model,
    slice_flip_model,
    slow_identity_model,
    sometimes_failing_model,
    write_repository,
)
from tests.integration.load_traffic import Traffic
from tests.integration.metrics_scrape import scrape
from tests.integration.server_process import ServerProcess

CONFIG = 'name: "{name}"\nmax_batch_size: 8\nversion_policy: {{ latest: {{ num_versions: 1 }} }}\n'
# The models here answer in tens of microseconds, where scheduling noise alone moves a version's P95 by
# half or more (measured: +63% and +153% between versions that compute the same), so the promoted
# release allows any P95 and the rolled-back ones a rise of 150%; the slow candidate (32 layers)
# measured +1,730% to +1,880% (8 layers read about +140% once a step's first seconds go untimed).
# Noise may add P95 to the failed checks of a bad candidate: its own figure must be among them.
# Steps of 3 s cannot prove agreement with the gate's sequential bounds: they move on unproven.
GATE = {"min_requests": 30, "failure_threshold": 2, "max_p95_increase": 1.5, "on_inconclusive": "advance"}
SAME_MODEL_GATE = {**GATE, "max_p95_increase": 100.0}


def uniform() -> np.ndarray:
    return np.random.default_rng().random((1, 4), dtype=np.float32)


def start_release(server: ServerProcess, name: str, spec: dict[str, Any], candidate: onnx.ModelProto) -> None:
    """Declare the release, then install version 2 (one rename, as ``conch install``): the GitOps order."""
    reply = server.request("POST", f"/v2/models/{name}/release", json.dumps(spec).encode())
    assert reply.status == 200, reply.body
    assert server.repository is not None
    staging = server.repository / f".{name}-2"
    staging.mkdir()
    (staging / "model.onnx").write_bytes(candidate.SerializeToString())
    staging.rename(server.repository / name / "2")


def status(server: ServerProcess, name: str) -> dict[str, Any]:
    return dict(server.request("GET", f"/v2/models/{name}/release").json())


def wait_for(server: ServerProcess, name: str, states: set[str], timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while (current := status(server, name))["state"] not in states:
        assert time.monotonic() < deadline, json.dumps(current.get("gate"), indent=1)
        time.sleep(0.2)
    return current


def timeline(name: str, release: dict[str, Any], traffic: Traffic) -> str:
    """The release's events with seconds from its creation, and what the clients saw."""
    start = release["history"][0]["time"]
    lines = [f"release of {name}:"]
    for event in release["history"]:
        lines.append(f"  +{event['time'] - start:5.1f} s  {event['event']:<11} {event['reason']}")
    versions = Counter(answer.version for answer in traffic.answers)
    figures = release["shadow_figures"]
    lines.append(
        f"  clients: {len(traffic.answers)} answers ({dict(sorted(versions.items()))} by version), "
        f"{len(traffic.failures)} failed; shadow: {figures['compared']} compared, "
        f"{figures['agreements']} agreed, {figures['dropped']} dropped"
    )
    return "\n".join(lines)


def check_clients(traffic: Traffic) -> None:
    assert traffic.failures == [], traffic.failures[:5]
    assert len(traffic.answers) > 300
    for answer in traffic.answers[:: max(1, len(traffic.answers) // 500)]:
        np.testing.assert_allclose(answer.output, answer.values, rtol=1e-5, atol=1e-6)


@pytest.fixture
def served(start_server: Callable[..., ServerProcess], tmp_path: Path) -> Callable[[str], ServerProcess]:
    """A poll-mode server on a repository holding version 1 of ``name`` only."""

    def serve(name: str) -> ServerProcess:
        root = write_repository(tmp_path / name, {name: (scale_model(1.0), CONFIG.format(name=name))})
        poll = ["--model-control-mode", "poll", "--repository-poll-secs", "1"]
        return start_server(root, *poll, "--state-dir", str(tmp_path / "s"))

    return serve


def test_a_re_export_is_promoted_through_every_step(
    served: Callable[[str], ServerProcess],
) -> None:
    server = served("same")
    steps = [
        {"weight": 5, "duration": "3s"},
        {"weight": 50, "duration": "3s", "shadow": True},
        {"pause": True},
        {"weight": 100},
    ]
    traffic = Traffic(server, "same", uniform).start()
    try:
        start_release(
            server, "same", {"candidate": 2, "baseline": 1, "steps": steps, "gate": GATE}, scale_model(1.0)
        )
        paused = wait_for(server, "same", {"paused", "rolled_back"})
        time.sleep(2.0)
        still = status(server, "same")
        assert server.request("POST", "/v2/models/same/release/promote").status == 200
        promoted = wait_for(server, "same", {"promoted", "rolled_back"})
        time.sleep(1.0)
    finally:
        traffic.finish()
    print("\n" + timeline("same", promoted, traffic))

    assert paused["state"] == "paused" and paused["step"] == 3, paused["history"]
    assert still["state"] == "paused", "a pause step waits for promote"
    assert promoted["state"] == "promoted"
    assert [e["event"] for e in promoted["history"]] == [
        "created",
        "started",
        "advanced",
        "advanced",
        "advanced",
        "promoted",
    ]
    check_clients(traffic)
    assert {a.version for a in traffic.answers} == {1, 2}
    assert promoted["shadow_figures"]["agreements"] == promoted["shadow_figures"]["compared"] > 0


@pytest.mark.parametrize(
    ("name", "candidate", "figure"),
    [
        ("flipped", slice_flip_model(), "agreement"),
        ("slow", slow_identity_model(layers=32), "p95_increase"),
        ("failing", sometimes_failing_model(), "error_rate_increase"),
    ],
)
def test_a_bad_candidate_is_rolled_back_on_its_figure_with_no_failed_request(
    served: Callable[[str], ServerProcess],
    name: str,
    candidate: onnx.ModelProto,
    figure: str,
) -> None:
    server = served(name)
    steps = [
        {"weight": 0, "duration": "1h", "shadow": True},
        {"weight": 50, "duration": "1h"},
        {"weight": 100},
    ]
    gate = {**GATE, "min_agreement": 0.9 if figure == "agreement" else 0.0}
    traffic = Traffic(server, name, uniform).start()
    try:
        start_release(server, name, {"candidate": 2, "baseline": 1, "steps": steps, "gate": gate}, candidate)
        rolled = wait_for(server, name, {"rolled_back", "promoted"})
        time.sleep(0.5)
    finally:
        traffic.finish()
    page = scrape(server.metrics_url)
    print("\n" + timeline(name, rolled, traffic))

    assert rolled["state"] == "rolled_back"
    reason = rolled["history"][-1]["reason"]
    assert reason.startswith("gate: ") and re.search(
        rf"\b{figure} [-\d.e]+ \[[-\d.e]+, [-\d.e]+\] \(limit [\d.e]+\): failed", reason
    ), reason
    check_clients(traffic)
    assert {a.version for a in traffic.answers} == {1}, (
        "a weight-0 shadow step answers nothing from the candidate"
    )
    assert page.value("conch_release_rollbacks_total", model=name) == 1
    if name == "slow":
        assert page.value("conch_shadow_dropped_total", model=name) > 0, "copies are dropped, never requests"
