"""``package_model``: the layout, the recomputed metadata, reproducible bytes, and what is refused."""

from __future__ import annotations

import gzip
import hashlib
import os
import tarfile
from pathlib import Path

import pytest
from onnx import TensorProto

from conch.packaging.archive import PackageError
from conch.packaging.metadata import ModelMetadata
from conch.packaging.package import package_model
from conch.packaging.semver import parse_semver
from tests.fixtures.model_folders import write_model_folder
from tests.fixtures.onnx_models import identity_model

VERSION = parse_semver("2.1.0")


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    return write_model_folder(
        tmp_path / "models", "digits-mlp", identity_model(TensorProto.FLOAT), warmup=True
    )


def members(package: Path) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(package, "r:gz") as archive:
        return {member.name: member for member in archive}


def member_bytes(package: Path, name: str) -> bytes:
    with tarfile.open(package, "r:gz") as archive:
        stream = archive.extractfile(name)
        assert stream is not None
        return stream.read()


def test_default_name_layout_and_contents(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    package = package_model(model_dir, VERSION)
    assert package == tmp_path / "digits-mlp-v2.1.0.tar.gz"
    assert package.stat().st_mode & 0o777 == 0o644
    assert list(members(package)) == [
        "digits-mlp",
        "digits-mlp/1",
        "digits-mlp/1/metadata.json",
        "digits-mlp/1/model.onnx",
        "digits-mlp/config.pbtxt",
        "digits-mlp/warmup",
        "digits-mlp/warmup/INPUT0",
    ]
    for name, source in [
        ("digits-mlp/1/model.onnx", model_dir / "1" / "model.onnx"),
        ("digits-mlp/config.pbtxt", model_dir / "config.pbtxt"),
        ("digits-mlp/warmup/INPUT0", model_dir / "warmup" / "INPUT0"),
    ]:
        assert member_bytes(package, name) == source.read_bytes()


def test_metadata_gets_the_package_version_and_checksums_of_the_packaged_files(
    model_dir: Path, tmp_path: Path
) -> None:
    (model_dir / "config.pbtxt").write_text((model_dir / "config.pbtxt").read_text() + "# tuned\n")
    package = package_model(model_dir, VERSION, tmp_path / "out.tar.gz")
    metadata = ModelMetadata.from_json(member_bytes(package, "digits-mlp/1/metadata.json").decode())
    assert metadata.package_version == "2.1.0"
    assert metadata.version == 1
    sha = {
        name: "sha256:" + hashlib.sha256(member_bytes(package, name)).hexdigest()
        for name in members(package)
        if members(package)[name].isfile()
    }
    assert metadata.files == {"model.onnx": sha["digits-mlp/1/model.onnx"]}
    assert metadata.model_files == {
        "config.pbtxt": sha["digits-mlp/config.pbtxt"],
        "warmup/INPUT0": sha["digits-mlp/warmup/INPUT0"],
    }


def test_same_input_same_bytes_even_after_touch_and_chmod(model_dir: Path, tmp_path: Path) -> None:
    first = package_model(model_dir, VERSION, tmp_path / "first.tar.gz").read_bytes()
    for path in model_dir.rglob("*"):
        os.utime(path, (1_900_000_000, 1_900_000_000))
        path.chmod(0o700 if path.is_dir() else 0o600)
    second = package_model(model_dir, VERSION, tmp_path / "second.tar.gz").read_bytes()
    assert first == second
    assert first[:4] == b"\x1f\x8b\x08\x00"  # gzip, deflate, no flags: no file name in the header
    assert first[4:8] == b"\x00\x00\x00\x00"  # gzip mtime 0
    for member in members(tmp_path / "second.tar.gz").values():
        assert (member.mtime, member.uid, member.gid, member.uname, member.gname) == (0, 0, 0, "", "")
        assert member.mode == (0o755 if member.isdir() else 0o644)
    assert gzip.decompress(first)  # the whole stream is a valid gzip file


def test_packages_the_highest_version_unless_told(model_dir: Path, tmp_path: Path) -> None:
    model = identity_model(TensorProto.FLOAT)
    write_model_folder(model_dir.parent, "digits-mlp", model, version=3, extra_files={"labels.txt": b"3"})
    newest = members(package_model(model_dir, VERSION, tmp_path / "newest.tar.gz"))
    assert "digits-mlp/1/labels.txt" in newest
    chosen = members(package_model(model_dir, VERSION, tmp_path / "chosen.tar.gz", model_version=1))
    assert "digits-mlp/1/labels.txt" not in chosen
    with pytest.raises(PackageError, match="has no version 2; it has 1, 3"):
        package_model(model_dir, VERSION, tmp_path / "missing.tar.gz", model_version=2)


def test_version_without_metadata_is_refused(model_dir: Path, tmp_path: Path) -> None:
    (model_dir / "1" / "metadata.json").unlink()
    with pytest.raises(
        PackageError, match=r"version 1 of model 'digits-mlp' has no metadata.json.*conch export"
    ):
        package_model(model_dir, VERSION, tmp_path / "out.tar.gz")
    assert list(tmp_path.glob("*.tar.gz")) == []


def test_metadata_naming_another_model_is_refused(model_dir: Path, tmp_path: Path) -> None:
    path = model_dir / "1" / "metadata.json"
    path.write_text(path.read_text().replace('"name": "digits-mlp"', '"name": "other"'))
    with pytest.raises(PackageError, match="names model 'other' but its folder is 'digits-mlp'"):
        package_model(model_dir, VERSION, tmp_path / "out.tar.gz")


def test_model_that_fails_validation_is_refused(model_dir: Path, tmp_path: Path) -> None:
    config = model_dir / "config.pbtxt"
    config.write_text(config.read_text().replace("dims: [ 4 ] }\n]\noutput", "dims: [ 5 ] }\n]\noutput"))
    with pytest.raises(PackageError, match=r"model 'digits-mlp' fails validation.*\n  \S+ input") as refused:
        package_model(model_dir, VERSION, tmp_path / "out.tar.gz")
    assert "conch validate" in str(refused.value)
    assert list(tmp_path.glob("*.tar.gz")) == []


def test_linked_model_file_is_refused(model_dir: Path, tmp_path: Path) -> None:
    model_file = model_dir / "1" / "model.onnx"
    model_file.rename(tmp_path / "model.onnx")
    model_file.symlink_to(tmp_path / "model.onnx")
    with pytest.raises(PackageError, match=r"holds links \(1/model\.onnx\).*replace each link"):
        package_model(model_dir, VERSION, tmp_path / "out.tar.gz")
    assert not (tmp_path / "out.tar.gz").exists()
