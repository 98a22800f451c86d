"""``install_package``: the round trip, and every unsafe or tampered package refused with nothing written.

Hostile packages are written with ``tarfile`` directly, starting from the members of a real package.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
from onnx import TensorProto

from conch.packaging.archive import PackageError
from conch.packaging.install import install_package
from conch.packaging.metadata import ModelMetadata, read_metadata
from conch.packaging.package import package_model
from conch.packaging.semver import parse_semver
from tests.fixtures.model_folders import write_model_folder
from tests.fixtures.onnx_models import identity_model

Member = tuple[tarfile.TarInfo, bytes | None]
MODEL = "digits-mlp/1/model.onnx"


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """digits-mlp 1.0.0: identity FP32 [-1, 4] with a warm-up file."""
    source = tmp_path_factory.mktemp("source")
    model_dir = write_model_folder(source, "digits-mlp", identity_model(TensorProto.FLOAT), warmup=True)
    return package_model(model_dir, parse_semver("1.0.0"), source / "digits-mlp-v1.0.0.tar.gz")


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    root = tmp_path / "repository"
    root.mkdir()
    return root


def tree(root: Path) -> dict[str, str]:
    """Every path under ``root``, hidden ones included, with its content's sha256 (or what it is)."""
    entries = {}
    for path in sorted(root.rglob("*")):
        name = path.relative_to(root).as_posix()
        if path.is_symlink():
            entries[name] = f"link -> {path.readlink()}"
        elif path.is_dir():
            entries[name] = "folder"
        else:
            entries[name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return entries


def read_members(package: Path) -> list[Member]:
    with tarfile.open(package, "r:gz") as archive:
        return [
            (info, archive.extractfile(info).read() if info.isfile() else None)  # type: ignore[union-attr]
            for info in archive
        ]


def rebuild(package: Path, target: Path, edit: Callable[[list[Member]], object]) -> Path:
    """A copy of ``package`` whose member list ``edit`` changed in place."""
    members = read_members(package)
    edit(members)
    with tarfile.open(target, "w:gz") as archive:
        for info, data in members:
            archive.addfile(info, io.BytesIO(data) if data is not None else None)
    return target


def member(name: str, data: bytes | None = None, kind: bytes = tarfile.REGTYPE, link: str = "") -> Member:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    if data is not None:
        info.size = len(data)
    return info, data


def position(members: list[Member], name: str) -> int:
    return next(i for i, (info, _) in enumerate(members) if info.name == name)


def data_of(members: list[Member], name: str) -> bytes:
    data = members[position(members, name)][1]
    assert data is not None
    return data


def replace_data(members: list[Member], name: str, data: bytes) -> None:
    members[position(members, name)] = member(name, data)


def refused(hostile: Path, package: Path, repository: Path, message: str) -> None:
    """Install must refuse ``hostile`` with ``message`` and leave ``repository`` as it was, whether
    the model is new there or already served (with a tuned config)."""
    with pytest.raises(PackageError, match=message):
        install_package(hostile, repository)
    assert tree(repository) == {}
    install_package(package, repository)
    (repository / "digits-mlp" / "config.pbtxt").write_text('name: "digits-mlp"\n# tuned\n')
    before = tree(repository)
    with pytest.raises(PackageError, match=message):
        install_package(hostile, repository)
    assert tree(repository) == before


def test_round_trip_into_an_empty_repository(package: Path, repository: Path) -> None:
    installed = install_package(package, repository)
    assert (installed.name, installed.package_version, installed.version) == ("digits-mlp", "1.0.0", 1)
    assert not installed.model_files_replaced
    model_dir = repository / "digits-mlp"
    source = package.parent / "digits-mlp"
    for name in ("config.pbtxt", "warmup/INPUT0", "1/model.onnx"):
        assert (model_dir / name).read_bytes() == (source / name).read_bytes()
    assert list(tree(repository)) == [
        "digits-mlp",
        "digits-mlp/1",
        "digits-mlp/1/metadata.json",
        "digits-mlp/1/model.onnx",
        "digits-mlp/config.pbtxt",
        "digits-mlp/warmup",
        "digits-mlp/warmup/INPUT0",
    ]
    before = tree(repository)
    same = install_package(package, repository)
    assert same.already_installed and same.version == 1 and same.version_dir == model_dir / "1"
    assert tree(repository) == before, "installing the same package again changes nothing"
    again = install_package(package, repository, force=True)
    assert not again.already_installed
    assert again.version == 2 and again.version_dir == model_dir / "2"
    assert read_metadata(model_dir / "1").version == 1
    assert read_metadata(model_dir / "2").version == 2
    assert read_metadata(model_dir / "2").package_version == "1.0.0"
    assert (model_dir / "2" / "model.onnx").read_bytes() == (source / "1" / "model.onnx").read_bytes()


def test_chosen_version_number_and_taken_number(package: Path, repository: Path) -> None:
    assert install_package(package, repository, version=5).version_dir == repository / "digits-mlp" / "5"
    before = tree(repository)
    with pytest.raises(PackageError, match=r"version 5 of model 'digits-mlp' already exists.*as version 6"):
        install_package(package, repository, version=5)
    assert tree(repository) == before


def test_a_different_package_of_the_same_model_is_not_taken_for_an_installed_one(
    package: Path, repository: Path, tmp_path: Path
) -> None:
    install_package(package, repository)
    other_version = rebuild(package, tmp_path / "v1.0.1.tar.gz", lambda m: _set_package_version(m, "1.0.1"))
    assert install_package(other_version, repository).version == 2
    retrained = tmp_path / "retrained"
    graph = identity_model(TensorProto.FLOAT)
    graph.doc_string = "retrained"
    model_dir = write_model_folder(retrained, "digits-mlp", graph, warmup=True)
    same_version = package_model(model_dir, parse_semver("1.0.0"), retrained / "retrained.tar.gz")
    installed = install_package(same_version, repository)
    assert not installed.already_installed and installed.version == 3
    assert install_package(same_version, repository).version == 3
    assert install_package(other_version, repository).version == 2


def _set_package_version(members: list[Member], version: str) -> None:
    place = "digits-mlp/1/metadata.json"
    metadata = ModelMetadata.from_json(data_of(members, place).decode())
    replace_data(members, place, dataclasses.replace(metadata, package_version=version).to_json().encode())


HOSTILE: dict[str, tuple[Callable[[list[Member]], object], str]] = {
    "tampered byte": (
        lambda m: replace_data(m, MODEL, data_of(m, MODEL)[:-1] + b"\x00"),
        r"fails its checksums(.|\n)*1/model.onnx: sha256 differs",
    ),
    "tampered config": (
        lambda m: replace_data(m, "digits-mlp/config.pbtxt", b'name: "digits-mlp"\nmax_batch_size: 64\n'),
        "config.pbtxt: sha256 differs",
    ),
    "traversal": (lambda m: m.append(member("digits-mlp/1/../../../evil", b"x")), "leads out of its folder"),
    "traversal at the top": (lambda m: m.insert(0, member("../evil", b"x")), "leads out of its folder"),
    "absolute path": (lambda m: m.append(member("/tmp/evil", b"x")), "has an absolute path"),
    "symlink": (
        lambda m: m.append(member("digits-mlp/1/link", kind=tarfile.SYMTYPE, link="/etc/passwd")),
        "is a symbolic link",
    ),
    "hard link": (
        lambda m: m.append(member("digits-mlp/1/hard", kind=tarfile.LNKTYPE, link=MODEL)),
        "is a hard link",
    ),
    "device": (lambda m: m.append(member("digits-mlp/1/tty", kind=tarfile.CHRTYPE)), "is a character device"),
    "fifo": (lambda m: m.append(member("digits-mlp/1/pipe", kind=tarfile.FIFOTYPE)), "is a fifo"),
    "unlisted file": (
        lambda m: m.append(member("digits-mlp/1/extra.bin", b"x")),
        "1/extra.bin: present but not listed",
    ),
    "unlisted warm-up file": (
        lambda m: m.append(member("digits-mlp/warmup/more", b"x")),
        "warmup/more: present but not listed",
    ),
    "missing file": (lambda m: m.pop(position(m, MODEL)), "1/model.onnx: listed but missing"),
    "outside the layout": (
        lambda m: m.append(member("digits-mlp/notes.txt", b"x")),
        "outside the package layout",
    ),
    "second top folder": (
        lambda m: m.append(member("other/1/model.onnx", b"x")),
        "outside the package layout",
    ),
    "twice": (lambda m: m.append(m[position(m, MODEL)]), "appears twice"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_package_is_refused_and_nothing_written(
    case: str, package: Path, repository: Path, tmp_path: Path
) -> None:
    edit, message = HOSTILE[case]
    hostile = rebuild(package, tmp_path / "hostile.tar.gz", edit)
    refused(hostile, package, repository, message)
    assert not any(path.name == "evil" for path in tmp_path.parent.rglob("*"))


def metadata_edit(change: Callable[[ModelMetadata], None]) -> Callable[[list[Member]], None]:
    def edit(members: list[Member]) -> None:
        metadata = ModelMetadata.from_json(data_of(members, "digits-mlp/1/metadata.json").decode())
        change(metadata)
        replace_data(members, "digits-mlp/1/metadata.json", metadata.to_json().encode())

    return edit


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda m: setattr(m, "package_version", None), "has no package_version"),
        (lambda m: setattr(m, "package_version", "1.0"), "'1.0' is not a SemVer"),
        (lambda m: setattr(m, "name", "../evil"), "'../evil' is not a safe folder name"),
        (lambda m: setattr(m, "name", "other"), "holds folder 'digits-mlp' but its metadata.json names"),
    ],
)
def test_bad_metadata_is_refused(
    change: Callable[[ModelMetadata], None], message: str, package: Path, repository: Path, tmp_path: Path
) -> None:
    refused(rebuild(package, tmp_path / "bad.tar.gz", metadata_edit(change)), package, repository, message)


def plain_tar(package: Path, target: Path) -> None:
    with tarfile.open(target, "w") as archive:
        archive.add(package, arcname="digits-mlp/1/model.onnx")


UNREADABLE: dict[str, Callable[[Path, Path], object]] = {
    "uncompressed tar": plain_tar,
    "truncated": lambda package, target: target.write_bytes(package.read_bytes()[:-200]),
    "not an archive": lambda package, target: target.write_bytes(b"PK\x03\x04 a zip file"),
}


@pytest.mark.parametrize("case", sorted(UNREADABLE))
def test_unreadable_package_is_refused(case: str, package: Path, repository: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.tar.gz"
    UNREADABLE[case](package, bad)
    refused(bad, package, repository, r"is not a readable \.tar\.gz package")


def test_late_failure_leaves_no_staging_folder(package: Path, repository: Path, tmp_path: Path) -> None:
    # A name the filesystem cannot hold passes every check, then fails while the package is extracted.
    long_name = "x" * 300

    def edit(members: list[Member]) -> None:
        metadata_edit(lambda m: m.files.update({long_name: hashlib.sha256(b"x").hexdigest()}))(members)
        members.append(member(f"digits-mlp/1/{long_name}", b"x"))

    hostile = rebuild(package, tmp_path / "late.tar.gz", edit)
    refused(
        hostile, package, repository, "could not install into .*File name too long.*repository is unchanged"
    )
