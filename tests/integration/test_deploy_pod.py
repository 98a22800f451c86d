"""The pod ``conch deploy kubernetes`` describes, run as a real ``conch serve`` on loopback: its command,
its environment (every in-pod folder mapped into a temporary one), its ConfigMap's ``release.yaml``
placed where the mount puts it; then the probes it declares, and SIGTERM as the kubelet sends it after
``preStop``. What a cluster adds (the mounts themselves, the kubelet) is not here; what conch does with
the settings the manifests give it is."""

from __future__ import annotations

import json
import shutil
import signal
import ssl
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from conch.cli.main import main
from tests.fixtures.certificates import write_certificates
from tests.integration.server_process import ServerProcess

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "model_repository"
RELEASE = "candidate: 2\nbaseline: 1\nsteps:\n  - {weight: 10, duration: 10m}\n  - {weight: 100}\n"


def read(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(path.read_text())
    return document


def pod_environment(spec: dict[str, Any], fs: Path) -> dict[str, str]:
    """The container's environment with its absolute paths moved under ``fs``, and the folders of the
    pod's emptyDir volumes made there, as the kubelet makes them before the container starts."""
    conch = spec["containers"][0]
    empty = {volume["name"] for volume in spec.get("volumes", []) if "emptyDir" in volume}
    for mount in conch["volumeMounts"]:
        if mount["name"] in empty:
            (fs / mount["mountPath"].lstrip("/")).mkdir(parents=True, exist_ok=True)
    env = {item["name"]: item["value"] for item in conch["env"]}
    return {
        name: str(fs / value.lstrip("/")) if value.startswith("/") else value for name, value in env.items()
    }


@pytest.fixture(scope="module")
def pod(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, dict[str, Any]]]:
    root = tmp_path_factory.mktemp("pod")
    source = root / "source"
    shutil.copytree(EXAMPLES, source)
    (source / "iris-pipeline" / "release.yaml").write_text(RELEASE)
    out = root / "manifests"
    assert main(["deploy", "kubernetes", str(source), "-o", str(out), "--exit-timeout-secs", "5"]) == 0
    spec = read(out / "deployment.yaml")["spec"]["template"]["spec"]
    conch = spec["containers"][0]
    # The image's /models: the repository it was built from, plus what the ConfigMap mounts add.
    image_models = root / "models"
    shutil.copytree(EXAMPLES, image_models)
    releases = read(out / "releases.yaml")["data"]
    for mount in conch["volumeMounts"]:
        if mount["name"] == "releases":
            (image_models / Path(mount["mountPath"]).relative_to("/models")).write_text(
                releases[mount["subPath"]]
            )
    env = pod_environment(spec, root / "fs")
    assert conch["args"] == ["serve", "/models"]
    server = ServerProcess(image_models, env=env).start(root)
    yield server, conch | {"terminationGracePeriodSeconds": spec["terminationGracePeriodSeconds"]}
    server.stop()


def test_the_probes_answer(pod: tuple[ServerProcess, dict[str, Any]]) -> None:
    server, conch = pod
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert server.request("GET", conch[probe]["httpGet"]["path"]).status == 200, probe


def test_the_pod_settings_reach_the_server(pod: tuple[ServerProcess, dict[str, Any]]) -> None:
    server, _ = pod
    release = server.request("GET", "/v2/models/iris-pipeline/release")
    assert release.status == 200, release.body
    status = json.loads(release.body)
    assert status["state"] == "pending" and status["candidate"] == 2  # version 2 is not in the image yet
    assert any(line.startswith("{") for line in server.log().splitlines())  # CONCH_LOG_FORMAT=json


def test_sigterm_turns_not_ready_then_exits_within_the_grace_period(
    pod: tuple[ServerProcess, dict[str, Any]],
) -> None:
    server, conch = pod
    assert server.process is not None
    started = time.monotonic()
    server.process.send_signal(signal.SIGTERM)
    readiness = conch["readinessProbe"]["httpGet"]["path"]
    answers = []
    while server.process.poll() is None and time.monotonic() - started < 3:
        try:
            answers.append(server.request("GET", readiness).status)
        except OSError:
            break
        time.sleep(0.1)
    # Never ready again once SIGTERM is in; with nothing in flight the drain may end before a probe.
    assert all(status == 503 for status in answers), answers
    server.process.wait(conch["terminationGracePeriodSeconds"])
    took = time.monotonic() - started
    pre_stop = int(conch["lifecycle"]["preStop"]["exec"]["command"][1])
    assert took + pre_stop < conch["terminationGracePeriodSeconds"]


def test_a_pod_with_a_tls_secret_serves_https_and_its_probes_answer(tmp_path: Path) -> None:
    out = tmp_path / "manifests"
    assert main(["deploy", "kubernetes", str(EXAMPLES), "-o", str(out), "--tls-secret", "conch-tls"]) == 0
    spec = read(out / "deployment.yaml")["spec"]["template"]["spec"]
    conch = spec["containers"][0]
    fs = tmp_path / "fs"
    # The Secret's keys, where its volume mounts them (kubectl create secret tls: tls.crt, tls.key).
    mount = next(m["mountPath"] for m in conch["volumeMounts"] if m["name"] == "tls")
    made = write_certificates(tmp_path / "ca")
    secret = fs / mount.lstrip("/")
    secret.mkdir(parents=True)
    shutil.copy(made.server_cert, secret / "tls.crt")
    shutil.copy(made.server_key, secret / "tls.key")
    env = pod_environment(spec, fs)
    # The kubelet's HTTPS probes do not check the certificate; neither does this one.
    kubelet = ssl.create_default_context()
    kubelet.check_hostname, kubelet.verify_mode = False, ssl.CERT_NONE
    server = ServerProcess(EXAMPLES, env=env, https=kubelet).start(tmp_path)
    try:
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            get = conch[probe]["httpGet"]
            url = f"{get['scheme'].lower()}://127.0.0.1:{server.http_port}{get['path']}"
            with urllib.request.urlopen(url, context=kubelet, timeout=10) as answer:
                assert answer.status == 200, probe
    finally:
        server.stop()
