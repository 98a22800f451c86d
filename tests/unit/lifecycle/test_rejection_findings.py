"""``conch validate`` and ``conch deploy`` name the versions a release rejected, read from the store."""

from __future__ import annotations

from pathlib import Path

import pytest

from conch.cli.main import main
from conch.lifecycle.fingerprint import content_fingerprint
from conch.release.verdict_store import VERDICTS_FOLDER, VerdictStore
from conch.release.verdicts import REJECTED, Verdict
from conch.validation.rejections import rejection_findings, store_location
from tests.fixtures.onnx_models import scale_model, write_repository

CONFIG = 'name: "m"\nmax_batch_size: 8\n'


def rejected_repository(tmp_path: Path) -> Path:
    root = write_repository(tmp_path / "repo", {"m": (scale_model(1.0), CONFIG)})
    (root / "m" / "2").mkdir()
    (root / "m" / "2" / "model.onnx").write_bytes(scale_model(2.0).SerializeToString())
    fingerprint = content_fingerprint(root / "m" / "2")
    verdict = Verdict(REJECTED, "m", 1.0, version=2, fingerprint=fingerprint, reason="gate: agreement 0.5")
    VerdictStore(str(root / VERDICTS_FOLDER)).append(verdict)
    return root


def test_a_rejected_version_is_a_warning_until_its_folder_holds_other_content(tmp_path: Path) -> None:
    root = rejected_repository(tmp_path)
    location = store_location(root, None)
    assert location == str(root / VERDICTS_FOLDER)
    [finding] = rejection_findings([root / "m"], location)
    assert (finding.code, finding.field) == ("rejected-version", "2/")
    assert "gate: agreement 0.5" in finding.message and "conch release readmit m 2" in finding.hint
    (root / "m" / "2" / "model.onnx").write_bytes(scale_model(3.0).SerializeToString())
    [changed] = rejection_findings([root / "m"], location)
    assert changed.code == "rejected-version-changed"


def test_no_store_no_finding_and_an_unreadable_store_says_so(tmp_path: Path) -> None:
    root = write_repository(tmp_path / "repo", {"m": (scale_model(1.0), CONFIG)})
    assert store_location(root, None) is None
    (tmp_path / "not-a-folder").write_text("x")
    [finding] = rejection_findings([root / "m"], str(tmp_path / "not-a-folder"))
    assert finding.code == "release-store-unreadable"


def test_conch_validate_and_deploy_name_the_rejected_version(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = rejected_repository(tmp_path)
    assert main(["validate", str(root)]) == 0  # a warning, not an error
    assert "rejected-version" in capsys.readouterr().out
    assert main(["deploy", "kubernetes", str(root), "-o", str(tmp_path / "out")]) == 0
    errors = capsys.readouterr().err
    assert "m 2/: version 2 was rejected" in errors
    assert "--release-store" in errors  # the image's pods would not share their verdicts
    deployment = (tmp_path / "out" / "deployment.yaml").read_text()
    assert "CONCH_RELEASE_STORE" in deployment
