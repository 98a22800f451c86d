"""Hypothesis fuzzing of the package readers: ``conch install`` and ``metadata.json``.

A valid package is damaged at three levels (its gzip bytes, its tar bytes, its member list: names,
kinds, contents), then installed. Each install either succeeds inside the repository or is a
:class:`PackageError` that leaves the repository as it was; nothing is ever written beside it, and no
other exception escapes. ``metadata.json`` text either reads or is a :class:`MetadataError`.
"""

from __future__ import annotations

import gzip
import io
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from onnx import TensorProto

from conch.packaging.archive import PackageError
from conch.packaging.install import install_package
from conch.packaging.metadata import MetadataError, ModelMetadata
from conch.packaging.package import package_model
from conch.packaging.semver import parse_semver
from tests.fixtures.model_folders import write_model_folder
from tests.fixtures.onnx_models import identity_model
from tests.unit.fuzzing import FUZZ, JSON, decodes_or_refuses
from tests.unit.packaging.test_install import Member, member, read_members, tree


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = tmp_path_factory.mktemp("fuzz-source")
    model_dir = write_model_folder(source, "digits-mlp", identity_model(TensorProto.FLOAT), warmup=True)
    return package_model(model_dir, parse_semver("1.0.0"), source / "digits-mlp-v1.0.0.tar.gz")


def install_or_refuse(data: bytes) -> None:
    """Install ``data`` as a package into a fresh repository and check what it left."""
    with tempfile.TemporaryDirectory() as work:
        root = Path(work)
        hostile = root / "package.tar.gz"
        hostile.write_bytes(data)
        repository = root / "repository"
        repository.mkdir()
        installed = decodes_or_refuses(lambda: install_package(hostile, repository), PackageError)
        assert sorted(p.name for p in root.iterdir()) == ["package.tar.gz", "repository"]
        if installed is None:
            assert tree(repository) == {}
        else:
            assert installed.version_dir.resolve().is_relative_to(repository.resolve())
            assert not any(p.is_symlink() for p in repository.rglob("*"))


@FUZZ
@given(st.integers(0, 1 << 20), st.binary(min_size=0, max_size=4), st.integers(0, 3))
def test_damaged_gzip_bytes_install_or_are_refused(package: Path, where: int, junk: bytes, how: int) -> None:
    data = package.read_bytes()
    where %= len(data)
    if how == 0:
        data = data[:where]
    elif how == 1:
        data = data[:where] + junk + data[where + 1 :]
    else:
        data = data[:where] + junk + data[where:]
    install_or_refuse(data)


@FUZZ
@given(st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)), min_size=1, max_size=6))
def test_damaged_tar_bytes_install_or_are_refused(package: Path, edits: list[tuple[int, int]]) -> None:
    tar = bytearray(gzip.decompress(package.read_bytes()))
    for where, value in edits:
        tar[where % len(tar)] = value
    install_or_refuse(gzip.compress(bytes(tar)))


names = st.sampled_from(
    [
        "digits-mlp/config.pbtxt",
        "digits-mlp/1/metadata.json",
        "digits-mlp/1/model.onnx",
        "digits-mlp/warmup/sample",
        "digits-mlp/../escape",
        "/etc/cron.d/evil",
        "digits-mlp/1/../../escape",
        "other/1/model.onnx",
        "digits-mlp",
        "digits-mlp/1",
        "",
        ".",
        "digits-mlp/./1/x",
    ]
)
kinds = st.sampled_from(
    [tarfile.REGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.FIFOTYPE]
)
contents = st.binary(max_size=64) | JSON.map(orjson.dumps) | st.text(max_size=80).map(str.encode)


@st.composite
def member_edits(draw: st.DrawFn) -> list[tuple[str, Any]]:
    return draw(
        st.lists(
            st.one_of(
                st.tuples(st.just("rename"), st.integers(0, 20), names),
                st.tuples(st.just("kind"), st.integers(0, 20), kinds),
                st.tuples(st.just("content"), st.integers(0, 20), contents),
                st.tuples(st.just("drop"), st.integers(0, 20), st.none()),
                st.tuples(st.just("add"), names, contents),
            ),
            min_size=1,
            max_size=4,
        )
    )


def _apply(members: list[Member], edit: tuple[str, Any, Any]) -> None:
    action, target, value = edit
    if action == "add":
        members.append(member(target, value))
        return
    index = target % len(members)
    info, data = members[index]
    if action == "rename":
        info.name = value
    elif action == "kind":
        info.type = value
        info.linkname = "/etc/passwd" if value in (tarfile.SYMTYPE, tarfile.LNKTYPE) else ""
        if value != tarfile.REGTYPE:
            info.size, data = 0, None
    elif action == "content":
        info.size, data = len(value), value
        info.type = tarfile.REGTYPE
    else:
        del members[index]
        return
    members[index] = (info, data)


@FUZZ
@given(member_edits())
def test_edited_members_install_or_are_refused(package: Path, edits: list[tuple[str, Any, Any]]) -> None:
    members = read_members(package)
    for edit in edits:
        if members or edit[0] == "add":
            _apply(members, edit)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for info, data in members:
            archive.addfile(info, io.BytesIO(data) if data is not None else None)
    install_or_refuse(buffer.getvalue())


metadata_fields = st.fixed_dictionaries(
    {},
    optional={
        "format": st.just("conch.model-metadata/1") | JSON,
        "name": st.sampled_from(["digits-mlp", "../x", ""]) | JSON,
        "version": st.integers(-1, 3) | JSON,
        "created": JSON,
        "framework": JSON,
        "libraries": JSON,
        "inputs": st.lists(st.fixed_dictionaries({"name": JSON, "datatype": JSON, "shape": JSON}), max_size=2)
        | JSON,
        "outputs": JSON,
        "checksums": st.dictionaries(st.text(max_size=8), st.text(max_size=70), max_size=2) | JSON,
        "package_version": st.sampled_from(["1.0.0", "1.0", "v1"]) | JSON,
    },
)


@FUZZ
@given(metadata_fields.map(orjson.dumps) | st.binary(max_size=100))
def test_metadata_json_reads_or_is_a_metadata_error(text: bytes) -> None:
    decoded = decodes_or_refuses(
        lambda: ModelMetadata.from_json(text.decode("utf-8", "replace")), MetadataError
    )
    if decoded is not None:
        assert isinstance(decoded, ModelMetadata)
