"""``conch package`` and ``conch install`` as a user runs them, up to an inference from ``conch serve``.

Library behaviour (every hostile package, the MAJOR rule in detail) is covered in tests/unit; here the
commands' exit codes, messages and the served result.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from onnx import TensorProto

from tests.fixtures.model_folders import write_model_folder
from tests.fixtures.onnx_models import add_sub_model, identity_model
from tests.integration.server_process import ServerProcess


def conch(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "conch.cli.main", *map(str, args)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=cwd, timeout=120)
    assert "Traceback" not in done.stderr
    return done


def tree(root: Path) -> dict[str, str]:
    return {
        path.relative_to(root).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        if path.is_file()
        else "/"
        for path in sorted(root.rglob("*"))
    }


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """add-sub as ``conch export`` would leave it: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1."""
    return write_model_folder(tmp_path_factory.mktemp("source"), "add-sub", add_sub_model(), warmup=True)


def test_package_install_serve(
    source: Path, tmp_path: Path, start_server: Callable[..., ServerProcess]
) -> None:
    packaged = conch("package", source, "--version", "1.2.0", cwd=tmp_path)
    assert packaged.returncode == 0, packaged.stderr
    package = tmp_path / "add-sub-v1.2.0.tar.gz"
    assert packaged.stdout.strip() == f"packaged add-sub 1.2.0 as {package}"

    repository = tmp_path / "repository"
    repository.mkdir()
    installed = conch("install", package, "--repository", repository)
    assert installed.returncode == 0, installed.stderr
    assert installed.stdout.splitlines() == [
        f"installed add-sub 1.2.0 as version 1 in {repository / 'add-sub' / '1'}"
    ]

    server = start_server(repository)
    client = httpclient.InferenceServerClient(server.http_url)
    a = np.arange(32, dtype=np.float32).reshape(2, 16)
    b = np.full((2, 16), 0.5, dtype=np.float32)
    inputs = [
        httpclient.InferInput("INPUT0", [2, 16], "FP32"),
        httpclient.InferInput("INPUT1", [2, 16], "FP32"),
    ]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    result = client.infer("add-sub", inputs, model_version="1")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def test_installing_the_same_package_twice_changes_nothing_unless_forced(
    source: Path, tmp_path: Path
) -> None:
    package = tmp_path / "add-sub.tar.gz"
    assert conch("package", source, "--version", "1.0.0", "-o", package).returncode == 0
    repository = tmp_path / "repository"
    assert conch("install", package, "--repository", repository).returncode == 0
    before = tree(repository)
    again = conch("install", package, "--repository", repository)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == [
        f"add-sub 1.0.0 is already installed as version 1 in {repository / 'add-sub' / '1'}; "
        "nothing changed (--force installs a copy)"
    ]
    assert tree(repository) == before
    forced = conch("install", package, "--repository", repository, "--force")
    assert forced.returncode == 0, forced.stderr
    assert forced.stdout.splitlines()[0] == (
        f"installed add-sub 1.0.0 as version 2 in {repository / 'add-sub' / '2'}"
    )


def test_same_model_same_package_bytes(source: Path, tmp_path: Path) -> None:
    first, second = tmp_path / "first.tar.gz", tmp_path / "second.tar.gz"
    assert conch("package", source, "--version", "1.0.0", "-o", first).returncode == 0
    for path in source.rglob("*"):
        path.touch()
    assert conch("package", source, "--version", "1.0.0", "--output", second).returncode == 0
    assert first.read_bytes() == second.read_bytes()


@pytest.mark.parametrize("version", ["1.0", "v1.0.0", "01.0.0"])
def test_non_semver_version_is_a_usage_error(source: Path, tmp_path: Path, version: str) -> None:
    done = conch("package", source, "--version", version, cwd=tmp_path)
    assert done.returncode == 2
    assert f"'{version}' is not a SemVer 2.0.0 version" in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_invalid_model_is_refused(tmp_path: Path) -> None:
    model_dir = write_model_folder(tmp_path, "broken", identity_model(TensorProto.FLOAT))
    config = model_dir / "config.pbtxt"
    config.write_text(config.read_text().replace("TYPE_FP32", "TYPE_INT32", 1))
    done = conch("package", model_dir, "--version", "1.0.0", cwd=tmp_path)
    assert done.returncode == 1
    assert "conch package: model 'broken' fails validation, so it is not packaged:" in done.stderr
    assert not list(tmp_path.glob("*.tar.gz"))


def test_install_refusals_and_usage_errors(source: Path, tmp_path: Path) -> None:
    package = tmp_path / "add-sub.tar.gz"
    assert conch("package", source, "--version", "1.0.0", "-o", package).returncode == 0
    repository = tmp_path / "repository"
    repository.mkdir()
    assert conch("install", package, "--repository", repository).returncode == 0

    other = write_model_folder(tmp_path / "other", "add-sub", identity_model(TensorProto.FLOAT))
    changed = tmp_path / "changed.tar.gz"
    assert conch("package", other, "--version", "1.1.0", "-o", changed).returncode == 0
    before = tree(repository)
    done = conch("install", changed, "--repository", repository)
    assert done.returncode == 1
    assert f"conch install: refused {changed}: add-sub 1.1.0 changes the interface" in done.stderr
    assert "  input 'INPUT1' removed (was FP32 [-1, 16])" in done.stderr
    assert tree(repository) == before

    tampered = tmp_path / "tampered.tar.gz"
    tampered.write_bytes(package.read_bytes()[:-100] + bytes(100))
    assert conch("install", tampered, "--repository", repository).returncode == 1
    assert conch("install", package, "--repository", tmp_path / "no" / "such" / "parent").returncode == 2
    assert conch("install", tampered, "--repository", tmp_path / "new").returncode == 1
    assert not (tmp_path / "new").exists(), "a refused package does not even create the repository"
    assert conch("install", package, "--repository", tmp_path / "new").returncode == 0
    assert (tmp_path / "new" / "add-sub" / "1" / "model.onnx").is_file()
    assert conch("install", tmp_path / "missing.tar.gz", "--repository", repository).returncode == 2
    assert conch("install", package, "--repository", repository, "--version", "0").returncode == 2
    assert tree(repository) == before
