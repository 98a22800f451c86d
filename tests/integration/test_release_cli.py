"""``conch release`` as a person or a CI step runs it: the installed console script against a real
``conch serve``, its tables, its JSON, its exit codes and its one-line errors.

Version ``k`` of each model multiplies its input by ``k`` (as in ``test_releases.py``), so the
candidate agrees with the baseline and the gate's checks pass once it has traffic. The steps last an
hour: the release moves only when a command moves it. Tables are read line by line, with the spaces
rich pads them with stripped.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.fixtures.certificates import write_certificates
from tests.fixtures.gateway_keys import AUTH_FLAGS, bearer, write_jwks
from tests.fixtures.onnx_models import scale_model, write_repository
from tests.integration.server_process import ServerProcess, free_port

CONCH = Path(sys.executable).with_name("conch")
MODELS = ("walked", "untouched")
RELEASE = """
candidate: 2
baseline: 1
steps:
  - {weight: 30, duration: 1h}
  - {weight: 60, duration: 1h}
  - {weight: 100}
gate:
  min_requests: 5
  failure_threshold: 2
  max_p95_increase: 1000   # a few answers' latencies on a shared machine say nothing
"""


def repository(root: Path) -> Path:
    """Each of :data:`MODELS` with version 1 (x1) and version 2 (x2); no release declared."""
    config = "max_batch_size: 8\nversion_policy: { latest: { num_versions: 1 } }\n"
    write_repository(root, {name: (scale_model(1.0), f'name: "{name}"\n{config}') for name in MODELS})
    for name in MODELS:
        (root / name / "2").mkdir()
        (root / name / "2" / "model.onnx").write_bytes(scale_model(2.0).SerializeToString())
    return root


def conch(*args: str, stdin: str | None = None, url: str | None = None) -> subprocess.CompletedProcess[str]:
    """``conch release ARGS`` with ``CONCH_URL`` set to ``url`` (unset when None)."""
    env = {key: value for key, value in os.environ.items() if key != "CONCH_URL"}
    if url is not None:
        env["CONCH_URL"] = url
    return subprocess.run(
        [str(CONCH), "release", *args], input=stdin, capture_output=True, text=True, timeout=60, env=env
    )


@pytest.fixture(scope="module")
def server(
    start_server: Callable[..., ServerProcess], tmp_path_factory: pytest.TempPathFactory
) -> ServerProcess:
    state = tmp_path_factory.mktemp("release-cli-state")
    return start_server(repository(tmp_path_factory.mktemp("release-cli")), "--state-dir", str(state))


@pytest.fixture(scope="module")
def url(server: ServerProcess) -> str:
    return f"http://{server.http_url}"


def infer(server: ServerProcess, model: str, count: int) -> None:
    with httpclient.InferenceServerClient(server.http_url) as client:
        for _ in range(count):
            request = httpclient.InferInput("INPUT0", [1, 4], "FP32")
            request.set_data_from_numpy(np.array([[0.5, 3.0, 1.0, 2.0]], np.float32))
            client.infer(model, [request])


def status_json(url: str, model: str) -> dict[str, Any]:
    result = conch("status", model, "--json", "--url", url)
    assert result.returncode == 0, result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def test_a_release_walked_from_start_to_rollback(server: ServerProcess, url: str, tmp_path: Path) -> None:
    (tmp_path / "release.yaml").write_text(RELEASE)

    started = conch("start", "walked", str(tmp_path / "release.yaml"), url=url)
    deadline = time.monotonic() + 20
    while status_json(url, "walked")["state"] == "pending":  # until version 1, the baseline, loads
        assert time.monotonic() < deadline, "the release never started"
        time.sleep(0.1)
    infer(server, "walked", 60)  # both versions past min_requests: 5; canary answers are compared
    while not status_json(url, "walked")["gate"]["ready"]:
        assert time.monotonic() < deadline, "the gate never judged the step"
        time.sleep(0.3)
    table = conch("status", "walked", url=url)
    resumed = conch("resume", "walked", "--url", url)
    promoted = conch("promote", "walked", "--url", url, "--json")
    rolled = conch("rollback", "walked", "--url", url)
    after = status_json(url, "walked")

    assert started.returncode == 0, started.stderr
    # The version policy had left version 1 unloaded: the split waits for it to load.
    assert "state     pending" in started.stdout, started.stdout
    assert "waiting for versions 1 and 2 to be READY" in started.stdout
    assert table.returncode == 0, table.stderr
    lines = [line.rstrip() for line in table.stdout.splitlines()]
    assert lines[0] == "Release of walked: version 1 to version 2"
    assert "state     progressing" in lines
    assert any(line.startswith("step      1 of 3: weight 30 for 1h") for line in lines), table.stdout
    assert "version 1 (baseline) 70%, version 2 (candidate) 30%" in table.stdout
    agreement = next(line.split() for line in lines if line.strip().startswith("agreement"))
    # A few dozen agreeing comparisons: the always-valid bound still straddles the default limit.
    assert agreement[:2] == ["agreement", "1"] and agreement[4:8] == ["at", "least", "0.98", "pending:"]
    assert "limit     min_agreement: default 0.98 (no expected agreement recorded)" in lines
    assert next(line.split() for line in lines if "  started " in line)[2:5] == [
        "started",
        "progressing",
        "1",
    ]
    assert resumed.returncode == 1
    assert resumed.stderr.strip().startswith("conch: cannot resume: the release of version 2 is progressing")
    assert promoted.returncode == 0, promoted.stderr
    moved = json.loads(promoted.stdout)
    assert (moved["state"], moved["step"], moved["weights"]) == ("progressing", 2, {"1": 40, "2": 60})
    assert (moved["gate"]["ready"], moved["gate"]["checks"]) == (False, []), "step 2 is judged afresh"
    assert rolled.returncode == 0, rolled.stderr
    assert "state     rolled_back" in rolled.stdout
    assert after["state"] == "rolled_back" and after["weights"] == {"1": 100, "2": 0}
    assert [event["event"] for event in after["history"]] == [
        "created",
        "started",
        "advanced",
        "rolled_back",
    ]


def test_a_bad_file_exits_2_naming_the_field_before_any_request(url: str) -> None:
    bad = RELEASE.replace("duration: 1h}", "duration: 10 minutes}", 1)

    from_stdin = conch("start", "untouched", "-", "--url", url, stdin=bad)
    missing = conch("start", "untouched", "/no/such/release.yaml", "--url", url)
    untouched = conch("status", "untouched", "--url", url)

    assert from_stdin.returncode == 2
    assert from_stdin.stderr.startswith(
        "conch: stdin: steps[0].duration must be a number with a unit s, m or h"
    )
    assert missing.returncode == 2
    assert missing.stderr == "conch: cannot read /no/such/release.yaml: No such file or directory\n"
    assert untouched.returncode == 1, "the server was never asked to start a release"
    assert "model 'untouched' has no release" in untouched.stderr


def test_an_unknown_model_exits_1_with_the_servers_404_message(url: str) -> None:
    result = conch("status", "no-such-model", url=url)

    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == "conch: Request for unknown model: 'no-such-model' is not found\n"


def test_an_unreachable_server_exits_1_with_one_line() -> None:
    address = f"http://127.0.0.1:{free_port()}"

    result = conch("promote", "walked", "--url", address)
    bad_scheme = conch("status", "walked", "--url", "ftp://example")

    assert result.returncode == 1
    assert result.stderr == f"conch: cannot reach {address}: connection refused\n"
    assert bad_scheme.returncode == 2
    assert "is not an http:// or https:// address" in bad_scheme.stderr


def test_gate_names_an_unreachable_prometheus_and_reads_the_file(tmp_path: Path) -> None:
    given, declared = f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"
    spec = tmp_path / "release.yaml"
    spec.write_text(RELEASE + f"  judge: prometheus\n  prometheus_url: {declared}\n")

    flags = conch("gate", "walked", "--prometheus", given, "--baseline", "1", "--candidate", "2")
    from_file = conch("gate", "walked", "--file", str(spec))
    incomplete = conch("gate", "walked", "--prometheus", given, "--baseline", "1")
    bad_window = conch("gate", "walked", "--file", str(spec), "--window", "10")

    assert flags.returncode == 1
    assert flags.stderr == f"conch: Prometheus at {given} did not answer: [Errno 111] Connection refused\n"
    assert from_file.returncode == 1
    assert from_file.stderr.startswith(f"conch: Prometheus at {declared} did not answer")
    assert incomplete.returncode == 2
    assert incomplete.stderr == "conch: release gate needs --candidate (or a --file that gives them)\n"
    assert bad_window.returncode == 2
    assert "--window must be a number with a unit s, m or h" in bad_window.stderr


def test_a_server_with_tls_and_jwt_auth_is_driven_with_a_ca_and_a_token(
    start_server: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    made = write_certificates(tmp_path / "tls")
    jwks = write_jwks(tmp_path / "jwks.json")
    tls = ["--http-use-ssl", "true", "--http-server-cert", str(made.server_cert)]
    tls += ["--http-server-key", str(made.server_key)]
    secured = start_server(
        repository(tmp_path / "models"),
        *AUTH_FLAGS,
        "--jwt-jwks",
        str(jwks),
        *tls,
        "--state-dir",
        str(tmp_path / "state"),
        https=ssl.create_default_context(cafile=str(made.ca)),
    )
    address = f"https://localhost:{secured.http_port}"
    admin = bearer("infer admin")["authorization"].split(" ", 1)[1]
    reader = bearer("infer")["authorization"].split(" ", 1)[1]

    ca = ["--url", address, "--ca-cert", str(made.ca)]
    anonymous = conch("status", "walked", *ca)
    before = conch("status", "walked", *ca, "--token", reader)
    refused = conch("start", "walked", "-", *ca, "--token", reader, stdin=RELEASE)
    started = conch("start", "walked", "-", *ca, "--token", admin, stdin=RELEASE)
    read = conch("status", "walked", "--json", *ca, "--token", reader)
    untrusted = conch("status", "walked", "--url", address, "--token", admin)
    bad_ca = conch("status", "walked", "--url", address, "--ca-cert", str(tmp_path / "none.pem"))

    assert anonymous.returncode == 1 and "token" in anonymous.stderr.lower()
    assert before.returncode == 1 and "has no release" in before.stderr  # through TLS and auth
    assert refused.returncode == 1 and "admin" in refused.stderr
    assert started.returncode == 0, started.stderr
    assert read.returncode == 0, read.stderr
    assert json.loads(read.stdout)["candidate"] == 2
    assert untrusted.returncode == 1 and "certificate is not trusted" in untrusted.stderr
    assert "--ca-cert" in untrusted.stderr
    assert bad_ca.returncode == 2 and "--ca-cert" in bad_ca.stderr
