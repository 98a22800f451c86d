"""A rolled-back version stays rejected everywhere: on the next release, on a fresh pod, on every replica.

The new user's day, with the gate's defaults and real servers on loopback:

- a benign retrain (version 2, whose predictions differ on 0.5% of rows) is promoted;
- a bad candidate (version 3, predictions flipped on half the inputs) is rolled back and rejected: a
  request naming it gets 404 with the readmit command, and the version policy serves version 2;
- a fresh server on the same repository with an empty state dir serves version 2, and does not start the
  ended release its ``release.yaml`` still declares;
- the next release, declared without a baseline, starts from version 2;
- version 3 serves nothing until it is re-admitted.

Then: two servers that share only a release store on moto's S3 server (each with its own copy of the
repository) agree on a rejection within one poll; a store that cannot be reached at start keeps the models
UNAVAILABLE; model control mode ``none`` loads a release's versions or refuses one whose candidate cannot
appear; and a step with ``approvals: 2`` waits for two distinct identities.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from tests.fixtures.gateway_keys import AUTH_FLAGS, write_jwks
from tests.fixtures.onnx_models import scale_model, slice_flip_model, write_repository
from tests.integration.load_traffic import Traffic
from tests.integration.metrics_scrape import scrape
from tests.integration.s3_store import running_moto
from tests.integration.server_process import ServerProcess
from tests.integration.test_gateway_auth import token

CONFIG = 'name: "m"\nmax_batch_size: 8\nversion_policy: { latest: { num_versions: 1 } }\n'
POLL = ("--model-control-mode", "poll", "--repository-poll-secs", "1", "--release-store-poll-secs", "1")
ROW = {"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [0.9, 0.1, 0.2, 0.3]}]}


def uniform() -> np.ndarray:
    return np.random.default_rng().random((1, 4), dtype=np.float32)


def install(repository: Path, version: int, model: onnx.ModelProto) -> None:
    """A version folder moved into place in one rename, as ``conch install`` does."""
    staging = repository / f".m-{version}"
    staging.mkdir()
    (staging / "model.onnx").write_bytes(model.SerializeToString())
    staging.rename(repository / "m" / str(version))


def declare(repository: Path, spec: dict[str, Any]) -> None:
    (repository / "m" / "release.yaml").write_text(json.dumps(spec))


def release(server: ServerProcess) -> dict[str, Any]:
    return dict(server.request("GET", "/v2/models/m/release").json())


def wait_for(server: ServerProcess, check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: {server.log()[-3000:]}"
        time.sleep(0.25)


def ended(server: ServerProcess, candidate: int) -> dict[str, Any]:
    def done() -> bool:
        reply = server.request("GET", "/v2/models/m/release")
        if reply.status != 200:
            return False
        status = reply.json()
        return bool(status["candidate"] == candidate and status["state"] in ("promoted", "rolled_back"))

    wait_for(server, done, f"release of version {candidate} ended", timeout=90)
    return release(server)


def infer(server: ServerProcess, version: int | None = None) -> tuple[int, dict[str, Any]]:
    path = "/v2/models/m/infer" if version is None else f"/v2/models/m/versions/{version}/infer"
    reply = server.request("POST", path, json.dumps(ROW).encode())
    return reply.status, reply.json()


def served_version(server: ServerProcess) -> int:
    status, body = infer(server)
    assert status == 200, body
    return int(body["model_version"])


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    return write_repository(tmp_path / "repo", {"m": (scale_model(1.0), CONFIG)})


def test_the_new_users_day_with_the_gates_defaults(
    start_server: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    # Every version is the same graph, so the versions differ in their answers only, not in compute: a
    # threshold of 2 flips nothing (inputs are uniform in [0, 1)), 0.995 flips 0.5% of rows, 0.5 half.
    repository = write_repository(tmp_path / "repo", {"m": (slice_flip_model(2.0), CONFIG)})
    server = start_server(repository, *POLL, "--state-dir", str(tmp_path / "state-1"))
    # 1. A benign retrain, declared first (the GitOps order), with no gate settings at all.
    declare(repository, {"candidate": 2, "steps": [{"weight": 50, "duration": "5s"}, {"weight": 100}]})
    traffic = Traffic(server, "m", uniform, clients=8).start()
    try:
        install(repository, 2, slice_flip_model(0.995))  # differs from version 1 on 0.5% of rows
        promoted = ended(server, 2)
        assert promoted["state"] == "promoted", promoted["history"]
        # 2. A bad candidate, declared without a baseline: it starts from version 2, is rolled back.
        declare(repository, {"candidate": 3, "steps": [{"weight": 10, "duration": "30s"}, {"weight": 100}]})
        install(repository, 3, slice_flip_model())
        rolled = ended(server, 3)
    finally:
        traffic.finish()
    assert traffic.failures == [], traffic.failures[:3]
    assert rolled["state"] == "rolled_back" and rolled["baseline"] == 2, rolled["history"]
    assert [r["version"] for r in rolled["rejected"]] == [3]
    assert rolled["last_promoted"] == 2
    wait_for(server, lambda: infer(server, 3)[0] == 404, "version 3 unloaded")
    body = infer(server, 3)[1]
    assert "rejected" in body["error"] and "conch release readmit m 3" in body["error"]
    assert served_version(server) == 2
    rejected = scrape(server.metrics_url).value("conch_model_version_rejected", model="m", version="3")
    assert rejected == 1
    server.stop()

    # 3. A new pod: the same repository and release.yaml, an empty state dir.
    fresh = start_server(repository, *POLL, "--state-dir", str(tmp_path / "state-2"))
    assert served_version(fresh) == 2
    assert infer(fresh, 3)[0] == 404
    assert fresh.request("GET", "/v2/models/m/release").status == 404  # the ended release did not restart
    # 4. The next release, declared without a baseline, starts from the last promoted version.
    reply = fresh.request(
        "POST", "/v2/models/m/release", json.dumps({"candidate": 3, "steps": [{"weight": 5}]}).encode()
    )
    assert reply.status == 400 and "conch release readmit m 3" in reply.json()["error"]
    declare(repository, {"candidate": 4, "steps": [{"weight": 10, "duration": "60s"}, {"weight": 100}]})
    wait_for(fresh, lambda: fresh.request("GET", "/v2/models/m/release").status == 200, "release of 4")
    install(repository, 4, slice_flip_model(2.0))
    wait_for(fresh, lambda: release(fresh)["state"] == "progressing", "release of 4 started")
    assert release(fresh)["baseline"] == 2
    # 5. Version 4 rolled back by hand is rejected too (the baseline keeps unversioned traffic); version
    # 3, re-admitted, is the newest version left, so it loads and answers when named.
    assert fresh.request("POST", "/v2/models/m/release/rollback").status == 200
    readmit = fresh.request("POST", "/v2/models/m/release/readmit", b'{"version": 3, "identity": "sre-1"}')
    assert readmit.status == 200, readmit.body
    assert [r["version"] for r in release(fresh)["rejected"]] == [4]
    wait_for(fresh, lambda: infer(fresh, 3)[0] == 200, "version 3 answers after readmit")
    assert served_version(fresh) == 2


def test_two_servers_that_share_only_an_s3_store_agree_on_a_rejection(
    start_server: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    with running_moto(tmp_path) as moto:
        env = moto.environment(tmp_path)
        store = ("--release-store", moto.url("verdicts"))
        servers = []
        for name in ("a", "b"):  # each replica has its own copy of the repository: nothing else is shared
            root = write_repository(tmp_path / name, {"m": (scale_model(1.0), CONFIG)})
            install(root, 2, scale_model(2.0))
            flags = (*POLL, *store, "--state-dir", str(tmp_path / f"state-{name}"))
            servers.append(start_server(root, *flags, env=env))
        a, b = servers
        assert served_version(a) == served_version(b) == 2
        spec = json.dumps({"candidate": 2, "baseline": 1, "steps": [{"weight": 10, "duration": "1h"}]})
        assert a.request("POST", "/v2/models/m/release", spec.encode()).status == 200
        wait_for(a, lambda: release(a)["state"] == "progressing", "release started on a")
        assert a.request("POST", "/v2/models/m/release/rollback").status == 200
        began = time.monotonic()
        wait_for(b, lambda: infer(b, 2)[0] == 404, "b learns the rejection", timeout=30)
        learned = time.monotonic() - began
        assert served_version(b) == 1
        assert "rejected" in infer(b, 2)[1]["error"]
        keys = [o["Key"] for o in moto.client().list_objects_v2(Bucket="conch-models")["Contents"]]
    assert any("/m/" in key and "-rejected-" in key for key in keys), keys
    # One poll (1 s here) plus a reload; generous for a loaded 2-core machine.
    assert learned < 15, learned


def test_a_store_that_cannot_be_read_at_start_keeps_the_models_unavailable(
    start_server: Callable[..., ServerProcess], repository: Path, tmp_path: Path
) -> None:
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the store's folder should be")
    server = start_server(repository, "--release-store", str(blocked), "--release-store-poll-secs", "1")
    status, body = infer(server)
    assert status == 503, body
    assert "release store" in body["error"] and "no version is served" in body["error"]
    assert server.request("GET", "/v2/health/ready").status == 503
    blocked.unlink()  # the store answers (an empty folder): the models load within a poll
    wait_for(server, lambda: infer(server)[0] == 200, "models load once the store answers", timeout=30)


def test_model_control_mode_none_loads_a_releases_versions_or_refuses_it(
    start_server: Callable[..., ServerProcess], repository: Path, tmp_path: Path
) -> None:
    server = start_server(repository, "--state-dir", str(tmp_path / "state"))  # mode none, the default
    spec = {"candidate": 2, "steps": [{"pause": True}, {"weight": 100}]}
    refused = server.request("POST", "/v2/models/m/release", json.dumps(spec).encode())
    assert refused.status == 400 and "--model-control-mode" in refused.json()["error"], refused.body
    install(repository, 2, scale_model(1.0))  # a folder the server never loaded by itself
    assert served_version(server) == 1
    assert server.request("POST", "/v2/models/m/release", json.dumps(spec).encode()).status == 200
    wait_for(server, lambda: release(server)["state"] == "paused", "the release loads version 2 and starts")
    assert infer(server, 2)[0] == 200


def test_a_step_with_two_approvals_waits_for_two_distinct_identities(
    start_server: Callable[..., ServerProcess], repository: Path, tmp_path: Path
) -> None:
    install(repository, 2, scale_model(1.0))
    server = start_server(repository, "--state-dir", str(tmp_path / "state"))
    spec = {"candidate": 2, "baseline": 1, "steps": [{"pause": True, "approvals": 2}, {"weight": 100}]}
    assert server.request("POST", "/v2/models/m/release", json.dumps(spec).encode()).status == 200
    wait_for(server, lambda: release(server)["state"] == "paused", "the release waits at its pause step")
    assert "nobody verifies" in release(server)["history"][1]["reason"]  # no --auth jwt: a warning
    early = server.request("POST", "/v2/models/m/release/promote")
    assert early.status == 400 and "needs 2 approvals" in early.json()["error"]

    def approve(who: str) -> Any:
        return server.request("POST", "/v2/models/m/release/approve", json.dumps({"identity": who}).encode())

    assert approve("alice").json()["approvals"] == {"needed": 2, "have": 1, "by": ["alice"]}
    again = approve("alice")
    assert again.status == 400 and "already approved" in again.json()["error"]
    assert release(server)["state"] == "paused"
    assert approve("bob").status == 200
    wait_for(server, lambda: release(server)["state"] == "promoted", "two approvals pass the step")
    events = [(e["event"], e["reason"]) for e in release(server)["history"]]
    assert ("approved", "by alice: 1 of 2") in events and ("approved", "by bob: 2 of 2") in events


def test_under_jwt_an_approver_is_the_tokens_subject_and_needs_the_admin_scope(
    start_server: Callable[..., ServerProcess], repository: Path, tmp_path: Path
) -> None:
    install(repository, 2, scale_model(1.0))
    jwks = write_jwks(tmp_path / "jwks.json")
    server = start_server(
        repository,
        *AUTH_FLAGS,
        "--jwt-jwks",
        str(jwks),
        "--state-dir",
        str(tmp_path / "s"),
        "--audit-log",
        str(tmp_path / "audit.jsonl"),
    )
    spec = {"candidate": 2, "baseline": 1, "steps": [{"pause": True, "approvals": 2}, {"weight": 100}]}
    admin = {"authorization": f"Bearer {token('admin infer', sub='sre-alice')}"}
    started = server.request("POST", "/v2/models/m/release", json.dumps(spec).encode(), admin)
    assert started.status == 200, started.body
    assert all(e["event"] != "warning" for e in started.json()["history"])  # identities are verified

    def approve(headers: dict[str, str], body: bytes = b"") -> Any:
        return server.request("POST", "/v2/models/m/release/approve", body, headers)

    def state() -> str:
        return str(server.request("GET", "/v2/models/m/release", headers=admin).json()["state"])

    wait_for(server, lambda: state() == "paused", "the release waits at its pause step")

    assert approve({"authorization": f"Bearer {token('infer', sub='intruder')}"}).status == 403
    assert approve(admin, b'{"identity": "someone-else"}').status == 400  # the token says who
    assert approve(admin).json()["approvals"]["by"] == ["sre-alice"]
    assert approve(admin).status == 400  # the same subject twice does not count
    bob = {"authorization": f"Bearer {token('admin', sub='sre-bob')}"}
    assert approve(bob).status == 200
    wait_for(server, lambda: state() == "promoted", "two verified approvals pass the step")
    lines = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    decided = [(line["kind"], line["identity"]) for line in lines if line["event"] == "release_verdict"]
    assert ("approved", "sre-alice") in decided and ("approved", "sre-bob") in decided, lines
    assert "promoted" in {kind for kind, _ in decided}
    assert not any(line["event"] == "inference_audit" for line in lines)  # no body sample was asked for
