"""Releases end to end: ``release.yaml`` or the API starts one, traffic splits by weight, canary and
shadow copies are compared, the gate promotes or rolls back, and a restart resumes where it was.

Version ``k`` of the model multiplies its input by ``k``, so each answer says which version computed
it. A scaled copy of the same answer has the same argmax and no drift (it agrees); version 9 negates
the input instead, so its predictions disagree with the baseline's on every row.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.fixtures.onnx_models import scale_model, write_repository
from tests.integration.metrics_scrape import scrape
from tests.integration.server_process import ServerProcess

CONFIG = 'name: "scored"\nmax_batch_size: 8\nversion_policy: { latest: { num_versions: 1 } }\n'
#: Each version runs its warm-up sample 50,000 times as it loads (about a second): a baseline the
#: release has to load stays unready long after the candidate is.
SLOW_LOADING = CONFIG + (
    'model_warmup [{ name: "slow" batch_size: 1 count: 50000\n'
    '  inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [4] zero_data: true } } }]\n'
)
PROMOTING = """
candidate: 2
baseline: 1
steps:
  - {weight: 30, duration: 3s}
  - {weight: 100}
gate:
  min_requests: 20
  failure_threshold: 2
  max_p95_increase: 100   # microsecond models: scheduling noise alone moves P95 by half
  on_inconclusive: advance   # 3 s of test traffic cannot prove agreement; the step moves on anyway
"""


def repository(
    root: Path, versions: dict[int, float], release: str | None = None, config: str = CONFIG
) -> Path:
    write_repository(root, {"scored": (scale_model(versions[1]), config)})
    for number, factor in versions.items():
        if number != 1:
            (root / "scored" / str(number)).mkdir()
            (root / "scored" / str(number) / "model.onnx").write_bytes(
                scale_model(factor).SerializeToString()
            )
    if release is not None:
        (root / "scored" / "release.yaml").write_text(release)
    return root


def infer(server: ServerProcess, key: str | None = None, version: str = "") -> tuple[str, float]:
    client = httpclient.InferenceServerClient(server.http_url)
    request = httpclient.InferInput("INPUT0", [1, 4], "FP32")
    request.set_data_from_numpy(np.array([[0.5, 3.0, 1.0, 2.0]], np.float32))
    headers = {"conch-route-key": key} if key else None
    result = client.infer("scored", [request], model_version=version, headers=headers)
    return result.get_response()["model_version"], float(result.as_numpy("OUTPUT0")[0, 1]) / 3.0


def status(server: ServerProcess) -> dict[str, Any]:
    reply = server.request("GET", "/v2/models/scored/release")
    assert reply.status == 200, reply.body
    return dict(reply.json())


def wait_for(
    server: ServerProcess, state: str, timeout: float = 30.0, traffic: bool = True
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        current = status(server)
        if current["state"] == state:
            return current
        assert time.monotonic() < deadline, current
        if traffic:
            for _ in range(10):
                infer(server)
        else:
            time.sleep(0.2)


def test_a_declared_release_splits_compares_and_promotes(
    start_server: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    root = repository(tmp_path / "models", {1: 1.0, 2: 2.0}, PROMOTING)
    server = start_server(root, "--state-dir", str(tmp_path / "state"))

    started = wait_for(server, "progressing", traffic=False)
    answers = Counter(infer(server)[0] for _ in range(300))
    for version, factor in (infer(server) for _ in range(20)):
        assert float(version) == pytest.approx(factor), "each answer is computed by the version it names"
    during = status(server)
    page = scrape(server.metrics_url)
    promoted = wait_for(server, "promoted")
    time.sleep(1.5)  # the baseline drains and unloads once the candidate serves everything
    index = server.request("POST", "/v2/repository/index", b"{}").json()

    assert started["step"] == 1 and started["weights"] == {"1": 70, "2": 30}
    assert 40 <= answers["2"] <= 140 and answers["1"] + answers["2"] == 300, answers
    assert during["shadow_figures"]["compared"] > 0, "canary answers are compared with the baseline"
    assert page.value("conch_release_weight", model="scored", version="2") == 30
    assert page.value("conch_release_state", model="scored", state="progressing") == 1
    assert page.value("conch_shadow_compared_total", model="scored") > 0
    assert [e["event"] for e in promoted["history"]][:2] == ["created", "started"]
    assert promoted["history"][-1]["event"] == "promoted"
    assert {infer(server)[0] for _ in range(20)} == {"2"}
    assert [e["version"] for e in index if e["name"] == "scored" and e["state"] == "READY"] == ["2"]
    saved = json.loads((tmp_path / "state" / "scored.release.json").read_text())
    assert saved["state"] == "promoted"


def test_a_candidate_that_disagrees_is_rolled_back_by_the_gate(
    start_server: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    root = repository(tmp_path / "models", {1: 1.0, 9: -1.0})
    server = start_server(root, "--state-dir", str(tmp_path / "state"))
    spec = {
        "candidate": 9,
        "baseline": 1,
        "steps": [{"weight": 50, "duration": "1h", "shadow": True}, {"weight": 100}],
        "gate": {"min_requests": 10, "failure_threshold": 2, "max_p95_increase": 100},
    }
    reply = server.request("POST", "/v2/models/scored/release", json.dumps(spec).encode())
    assert reply.status == 200, reply.body

    rolled = wait_for(server, "rolled_back")
    answers = {infer(server)[0] for _ in range(30)}
    page = scrape(server.metrics_url)

    assert rolled["weights"] == {"1": 100, "9": 0}
    assert rolled["history"][-1]["reason"].startswith("gate: agreement"), rolled["history"][-1]
    assert answers == {"1"}
    named = server.request("POST", "/v2/models/scored/versions/9/infer", b'{"inputs": []}')
    assert named.status == 404 and "conch release readmit scored 9" in named.json()["error"], named.body
    assert [r["version"] for r in rolled["rejected"]] == [9]
    assert page.value("conch_release_rollbacks_total", model="scored") == 1
    assert page.value("conch_shadow_agreements_total", model="scored") == 0


def test_a_route_key_always_lands_on_the_same_version(
    start_server: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    # The version policy leaves only version 2 loaded; the release loads version 1, its baseline,
    # slowly. Keys must not land on the candidate meanwhile: the split starts once both are READY.
    root = repository(tmp_path / "models", {1: 1.0, 2: 2.0}, config=SLOW_LOADING)
    server = start_server(root, "--state-dir", str(tmp_path / "state"))
    spec = {"candidate": 2, "steps": [{"weight": 50, "duration": "1h"}, {"weight": 100}]}
    assert server.request("POST", "/v2/models/scored/release", json.dumps(spec).encode()).status == 200
    assert status(server)["state"] == "pending", "version 1 is still warming up"
    wait_for(server, "progressing", traffic=False)
    assert server.request("GET", "/v2/models/scored/versions/1/ready").status == 200
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    request = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
    request.set_data_from_numpy(np.ones((1, 4), np.float32))

    by_key = {key: {infer(server, key)[0] for _ in range(5)} for key in (f"user-{i}" for i in range(20))}
    over_grpc = {
        key: {grpc.infer("scored", [request], headers={"conch-route-key": key}).get_response().model_version}
        for key in by_key
    }

    assert all(len(versions) == 1 for versions in by_key.values()), by_key
    assert {v for versions in by_key.values() for v in versions} == {"1", "2"}, "both versions get keys"
    assert {key: versions for key, versions in over_grpc.items()} == by_key, "HTTP and gRPC split alike"
    assert infer(server, "user-0", version="1")[0] == "1", "a named version is outside the split"


def test_a_baseline_that_fails_to_load_fails_the_release_and_the_candidate_serves(
    start_server: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    root = repository(tmp_path / "models", {1: 1.0, 2: 2.0})
    (root / "scored" / "1" / "model.onnx").write_bytes(b"not an onnx file")  # only 2 loads at start
    server = start_server(root, "--state-dir", str(tmp_path / "state"))
    spec = {"candidate": 2, "baseline": 1, "steps": [{"weight": 50, "duration": "1h"}, {"weight": 100}]}
    assert server.request("POST", "/v2/models/scored/release", json.dumps(spec).encode()).status == 200

    failed = wait_for(server, "failed", traffic=False)

    assert failed["history"][-1]["reason"].startswith("version 1 failed to load: ")
    assert {infer(server, f"user-{i}")[0] for i in range(10)} == {"2"}, "the candidate answers instead"


def test_a_restart_resumes_the_release_where_it_was(
    start_server: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    root = repository(tmp_path / "models", {1: 1.0, 2: 2.0})
    state = tmp_path / "state"
    first = start_server(root, "--state-dir", str(state))
    spec = {
        "candidate": 2,
        "steps": [{"weight": 5, "duration": "1h"}, {"weight": 40, "duration": "1h"}, {"weight": 100}],
    }
    assert first.request("POST", "/v2/models/scored/release", json.dumps(spec).encode()).status == 200
    wait_for(first, "progressing", traffic=False)
    moved = first.request("POST", "/v2/models/scored/release/promote")
    assert moved.status == 200 and moved.json()["step"] == 2
    assert first.stop() == 0

    second = start_server(root, "--state-dir", str(state))
    resumed = status(second)

    assert resumed["state"] == "progressing" and resumed["step"] == 2
    assert resumed["weights"] == {"1": 60, "2": 40}
    assert [e["event"] for e in resumed["history"]] == ["created", "started", "advanced"]
    versions = {infer(second)[0] for _ in range(60)}
    assert versions == {"1", "2"}, "both versions stay loaded despite the policy's latest 1"


def test_a_pending_release_starts_at_step_one_when_its_candidate_appears(
    start_server: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    release = "candidate: 2\nsteps:\n  - {weight: 10, duration: 1h}\n  - {weight: 100}\n"
    root = repository(tmp_path / "models", {1: 1.0}, release)
    server = start_server(
        root,
        "--model-control-mode",
        "poll",
        "--repository-poll-secs",
        "1",
        "--state-dir",
        str(tmp_path / "s"),
    )
    assert status(server)["state"] == "pending"
    staging = root / ".v2"
    staging.mkdir()
    (staging / "model.onnx").write_bytes(scale_model(2.0).SerializeToString())
    staging.rename(root / "scored" / "2")

    started = wait_for(server, "progressing", timeout=30, traffic=False)
    answers = Counter(infer(server)[0] for _ in range(100))

    assert started["step"] == 1 and started["weights"] == {"1": 90, "2": 10}
    assert answers["1"] > 70, "the new version starts at its first step instead of taking all traffic"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"candidate": 2, "steps": [{"weight": 50}, {"weight": 10}]}, "steps[1].weight (10) must be above"),
        ({"candidate": 2, "steps": [{"weight": 150}]}, "steps[0].weight"),
        ({"candidate": 2, "steps": [{"weight": 5, "duration": "10 minutes"}]}, "steps[0].duration"),
        (
            {"candidate": 2, "steps": [{"weight": 100}], "gate": {"min_agrement": 0.9}},
            "unknown key 'min_agrement'",
        ),
        (
            {"candidate": 2, "baseline": 7, "steps": [{"weight": 100}]},
            "baseline version 7 of 'scored' is not READY",
        ),
    ],
)
def test_bad_release_specs_are_refused_with_the_field_named(
    start_server: Callable[..., ServerProcess],
    tmp_path_factory: pytest.TempPathFactory,
    spec: dict[str, Any],
    message: str,
) -> None:
    base = tmp_path_factory.mktemp("bad")
    server = start_server(repository(base / "models", {1: 1.0, 2: 2.0}), "--state-dir", str(base / "state"))

    reply = server.request("POST", "/v2/models/scored/release", json.dumps(spec).encode())

    assert reply.status == 400, reply.body
    assert message in reply.json()["error"]
    assert server.request("GET", "/v2/models/scored/release").status == 404


def test_a_second_release_and_a_promote_with_nothing_to_promote_are_refused(
    start_server: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    server = start_server(
        repository(tmp_path / "models", {1: 1.0, 2: 2.0}), "--state-dir", str(tmp_path / "s")
    )
    spec = json.dumps({"candidate": 2, "steps": [{"weight": 10, "duration": "1h"}, {"weight": 100}]}).encode()
    assert server.request("POST", "/v2/models/scored/release", spec).status == 200
    wait_for(server, "progressing", traffic=False)

    second = server.request("POST", "/v2/models/scored/release", spec)
    rolled = server.request("POST", "/v2/models/scored/release/rollback")
    nothing = server.request("POST", "/v2/models/scored/release/promote")
    unknown = server.request("POST", "/v2/models/scored/release/explode")

    assert (
        second.status == 400
        and "already has a release of version 2 that is progressing" in second.json()["error"]
    )
    assert rolled.status == 200 and rolled.json()["state"] == "rolled_back"
    assert nothing.status == 400 and "nothing to promote" in nothing.json()["error"]
    assert unknown.status == 404 and "no release action 'explode'" in unknown.json()["error"]


def test_a_candidate_that_fails_to_load_fails_the_release_and_the_baseline_serves(
    start_server: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    release = "candidate: 2\nbaseline: 1\nsteps:\n  - {weight: 10, duration: 1h}\n  - {weight: 100}\n"
    root = repository(tmp_path / "models", {1: 1.0}, release)
    (root / "scored" / "2").mkdir()
    (root / "scored" / "2" / "model.onnx").write_bytes(b"not an onnx model")
    server = start_server(root, "--state-dir", str(tmp_path / "state"), "--strict-readiness", "false")

    failed = wait_for(server, "failed", traffic=False)
    again = server.request(
        "POST", "/v2/models/scored/release", json.dumps({"candidate": 2, "steps": [{"weight": 100}]}).encode()
    )

    assert failed["history"][-1]["reason"].startswith("version 2 failed to load")
    assert {infer(server)[0] for _ in range(10)} == {"1"}
    assert again.status == 400 and "candidate version 2 of 'scored' is not READY" in again.json()["error"]
