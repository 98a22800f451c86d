"""``release.yaml`` files through Git: ``conch deploy kubernetes`` ships them in a ConfigMap mounted where
conch reads them, and a change to one changes the pod template (so Argo CD's sync rolls the pods)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from conch.cli.main import main
from conch.deploy.releases import DIGEST_ANNOTATION

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "model_repository"
RELEASE = "candidate: 2\nbaseline: 1\nsteps:\n  - {weight: 10, duration: 10m}\n  - {weight: 100}\n"


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    folder = tmp_path / "repo"
    for model in ("iris-pipeline", "iris-autoconfig"):
        shutil.copytree(EXAMPLES / model, folder / model)
    (folder / "iris-pipeline" / "release.yaml").write_text(RELEASE)
    return folder


def deploy(repository: Path, out: Path, *flags: str) -> int:
    return main(["deploy", "kubernetes", str(repository), "-o", str(out), *flags])


def read(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(path.read_text())
    return document


def test_release_files_ship_in_a_config_map_mounted_where_conch_reads_them(
    repository: Path, tmp_path: Path
) -> None:
    assert deploy(repository, tmp_path / "out") == 0
    config_map = read(tmp_path / "out" / "releases.yaml")
    assert config_map["kind"] == "ConfigMap" and config_map["data"] == {"iris-pipeline": RELEASE}
    deployment = read(tmp_path / "out" / "deployment.yaml")
    pod = deployment["spec"]["template"]
    mounts = pod["spec"]["containers"][0]["volumeMounts"]
    assert {"name": "releases", "mountPath": "/models/iris-pipeline/release.yaml", "subPath": "iris-pipeline",
            "readOnly": True} in mounts  # fmt: skip
    assert {"name": "releases", "configMap": {"name": "conch-releases"}} in pod["spec"]["volumes"]
    for manifest in (config_map, deployment):
        kubernetes_validate.validate(manifest, kubernetes_validate.latest_version(), strict=True)


def test_a_changed_release_file_changes_the_pod_template(repository: Path, tmp_path: Path) -> None:
    assert deploy(repository, tmp_path / "first") == 0
    (repository / "iris-pipeline" / "release.yaml").write_text(RELEASE.replace("weight: 10,", "weight: 20,"))
    assert deploy(repository, tmp_path / "second") == 0
    first, second = (
        read(tmp_path / name / "deployment.yaml")["spec"]["template"] for name in ("first", "second")
    )
    assert (
        first["metadata"]["annotations"][DIGEST_ANNOTATION]
        != second["metadata"]["annotations"][DIGEST_ANNOTATION]
    )
    (repository / "iris-pipeline" / "release.yaml").unlink()
    assert deploy(repository, tmp_path / "third") == 0
    assert "annotations" not in read(tmp_path / "third" / "deployment.yaml")["spec"]["template"]["metadata"]
    assert not (tmp_path / "third" / "releases.yaml").exists()


def test_a_release_file_the_server_would_refuse_stops_the_deploy(
    repository: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (repository / "iris-pipeline" / "release.yaml").write_text("candidate: 2\nsteps:\n  - {weight: 120}\n")
    assert deploy(repository, tmp_path / "out") == 1
    captured = capsys.readouterr()
    assert "release-invalid" in captured.out and "steps[0].weight" in captured.out
    assert not (tmp_path / "out").exists()


def test_a_volume_keeps_its_own_release_files(
    repository: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert deploy(repository, tmp_path / "out", "--models", "pvc:models") == 0
    assert not (tmp_path / "out" / "releases.yaml").exists()
    assert "release.yaml of iris-pipeline not shipped" in capsys.readouterr().err
