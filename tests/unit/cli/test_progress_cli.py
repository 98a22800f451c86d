"""The long commands' progress and summaries, run in-process: plain lines off a terminal (as CI and
scripts see them), a rich bar and table on one (``TTY_COMPATIBLE=1`` is how rich is told so)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conch.cli.main import main
from tests.fixtures.model_folders import write_model_folder
from tests.fixtures.onnx_models import add_sub_model


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model_folder(tmp_path_factory.mktemp("source"), "add-sub", add_sub_model(), warmup=True)


def test_package_then_install_off_a_terminal(
    model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TTY_COMPATIBLE", "0")
    package = tmp_path / "add-sub.tar.gz"
    assert main(["package", str(model_dir), "--version", "1.0.0", "-o", str(package)]) == 0
    packaged = capsys.readouterr()
    assert packaged.out == f"packaged add-sub 1.0.0 as {package}\n"
    steps = packaged.err.splitlines()
    assert "conch package: add-sub 1: determinism" in steps
    assert steps[-2:] == [
        "conch package: add-sub 1: checksums",
        f"conch package: add-sub 1: writing {package}",
    ]
    assert "\x1b" not in packaged.err

    assert main(["install", str(package), "--repository", str(tmp_path / "repo")]) == 0
    installed = capsys.readouterr()
    assert installed.err.splitlines() == [
        "conch install: verifying add-sub.tar.gz: member paths, sizes, checksums",
        "conch install: unpacking add-sub 1.0.0 as version 1",
    ]
    assert installed.out.startswith("installed add-sub 1.0.0 as version 1 in ")


def test_package_and_validate_on_a_terminal(
    model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    package = tmp_path / "add-sub.tar.gz"
    assert main(["package", str(model_dir), "--version", "1.0.0", "-o", str(package)]) == 0
    packaged = capsys.readouterr()
    assert "━" in packaged.err and "\x1b[" in packaged.err  # a bar, drawn with escape codes
    assert "conch package: add-sub 1: checksums" not in packaged.err  # no plain lines
    assert "┃" in packaged.out and "add-sub" in packaged.out and "1.0.0" in packaged.out  # a table

    assert main(["validate", str(model_dir)]) == 0
    validated = capsys.readouterr()
    assert "1/1" in validated.err  # one model of one, done
    assert "\x1b" not in validated.out  # a clean model: no findings table, only its summary line
    assert validated.out.rstrip().endswith("1 model checked: 0 errors, 0 warnings, 0 infos: valid")


def test_export_on_a_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    model_file = tmp_path / "add_sub.onnx"
    model_file.write_bytes(add_sub_model().SerializeToString())
    np.savez(tmp_path / "sample.npz", INPUT0=np.ones((2, 16)), INPUT1=np.zeros((2, 16)))
    repository = tmp_path / "models"
    argv = ["export", str(model_file), "--sample", str(tmp_path / "sample.npz")]

    assert main([*argv, "--repository", str(repository), "--name", "add-sub"]) == 0

    exported = capsys.readouterr()
    assert "━" in exported.err and "conch export: running" not in exported.err  # a bar, no lines
    assert "┃" in exported.out and "bytes" in exported.out  # the files as a table, with sizes
    assert "1/model.onnx" in exported.out and "config.pbtxt" in exported.out
    assert "exported 'add-sub' version 1" in exported.out
