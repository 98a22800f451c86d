"""``conch package --sign`` and ``conch install --verify / --max-*`` as a user runs them.

Keys are made with openssl, as docs/packaging.md tells users to; every refusal exits 1 and leaves the
repository as it was. The library's cases in detail are in tests/unit/packaging/test_package_hardening.py.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.fixtures.model_folders import write_model_folder
from tests.fixtures.onnx_models import add_sub_model
from tests.integration.test_package_cli import conch, tree

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl to make keys")


def keypair(folder: Path, name: str) -> tuple[Path, Path]:
    private, public = folder / f"{name}.pem", folder / f"{name}.pub.pem"
    subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", private], check=True)
    subprocess.run(["openssl", "pkey", "-in", private, "-pubout", "-out", public], check=True)
    return private, public


def rewrite(package: Path, target: Path, name: str, change: bytes) -> Path:
    """A copy of ``package`` with ``change`` appended to member ``name``."""
    with tarfile.open(package, "r:gz") as source, tarfile.open(target, "w:gz") as out:
        for info in source:
            data = source.extractfile(info).read() if info.isfile() else None  # type: ignore[union-attr]
            if info.name == name and data is not None:
                data += change
                info.size = len(data)
            out.addfile(info, io.BytesIO(data) if data is not None else None)
    return target


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model_folder(tmp_path_factory.mktemp("source"), "add-sub", add_sub_model(), warmup=True)


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    root = tmp_path / "repository"
    root.mkdir()
    (root / "keep.txt").write_text("an operator's file")
    return root


def test_sign_verify_and_every_refusal(source: Path, tmp_path: Path, repository: Path) -> None:
    private, public = keypair(tmp_path, "release")
    _, other_public = keypair(tmp_path, "other")
    signed, unsigned = tmp_path / "signed.tar.gz", tmp_path / "unsigned.tar.gz"
    done = conch("package", source, "--version", "1.0.0", "-o", signed, "--sign", private)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[1].startswith("signed with key sha256:")
    assert conch("package", source, "--version", "1.0.0", "-o", unsigned).returncode == 0
    before = tree(repository)

    refusals = {
        "wrong key": (signed, other_public, "is signed by key sha256:"),
        "unsigned": (unsigned, public, "is not signed, and --verify asks for a signature"),
        "tampered metadata": (
            rewrite(signed, tmp_path / "meta.tar.gz", "add-sub/1/metadata.json", b" "),
            public,
            "signature does not match its metadata.json",
        ),
        "tampered bytes": (
            rewrite(signed, tmp_path / "bytes.tar.gz", "add-sub/1/model.onnx", b"\0"),
            public,
            "1/model.onnx: sha256 differs",
        ),
    }
    for case, (package, key, message) in refusals.items():
        done = conch("install", package, "--repository", repository, "--verify", key)
        assert done.returncode == 1, case
        assert f"conch install: refused {package}:" in done.stderr, case
        assert message in done.stderr, case
        assert tree(repository) == before, case

    done = conch("install", signed, "--repository", repository, "--verify", public)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[1].startswith("signature verified: signed by key sha256:")
    assert "sha256:" in (repository / "add-sub" / "1" / "metadata.json").read_text()
    assert not (repository / "add-sub" / "signature.json").exists()


def test_bombs_are_refused_by_the_flags(source: Path, tmp_path: Path, repository: Path) -> None:
    package = tmp_path / "add-sub.tar.gz"
    assert conch("package", source, "--version", "1.0.0", "-o", package).returncode == 0
    big = rewrite(package, tmp_path / "big.tar.gz", "add-sub/1/model.onnx", bytes(8 << 20))
    before = tree(repository)

    done = conch("install", big, "--repository", repository, "--max-unpacked-bytes", "1M")
    assert done.returncode == 1
    assert "unpacks to more than 1048576 bytes" in done.stderr
    assert "--max-unpacked-bytes" in done.stderr
    done = conch("install", package, "--repository", repository, "--max-members", "3")
    assert done.returncode == 1
    assert "more than 3 members" in done.stderr
    assert tree(repository) == before

    assert conch("install", package, "--repository", repository, "--max-members", "0").returncode == 2
    assert (
        conch("install", package, "--repository", repository, "--max-unpacked-bytes", "lots").returncode == 2
    )
    missing_key = conch("install", package, "--repository", repository, "--verify", tmp_path / "none.pem")
    assert missing_key.returncode == 2
    assert tree(repository) == before
    assert conch("install", big, "--repository", repository, "--max-unpacked-bytes", "64M").returncode == 1
