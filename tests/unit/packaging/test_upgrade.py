"""The MAJOR rule: an interface change installs only with a higher MAJOR, and then brings its config."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from onnx import TensorProto

from conch.packaging.archive import PackageError
from conch.packaging.install import install_package
from conch.packaging.metadata import read_metadata
from conch.packaging.package import package_model
from conch.packaging.semver import parse_semver
from conch.packaging.upgrade import interface_changes
from tests.fixtures.model_folders import write_model_folder
from tests.fixtures.onnx_models import add_sub_model, identity_model

FP32, FP64 = TensorProto.FLOAT, TensorProto.DOUBLE
CHANGES = [
    "input 'INPUT0': FP32 [-1, 4] -> FP64 [-1, 4]",
    "output 'OUTPUT0': FP32 [-1, 4] -> FP64 [-1, 4]",
]


@pytest.fixture(scope="module")
def packages(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[int, str], Path]:
    """digits-mlp packages by (ONNX element type, SemVer): identity [-1, 4] with a warm-up file."""
    made = {}
    for element_type, version in [
        (FP32, "1.0.0"),
        (FP32, "1.1.0"),
        (FP64, "0.9.0"),
        (FP64, "1.1.0"),
        (FP64, "2.0.0"),
    ]:
        source = tmp_path_factory.mktemp("source")
        model_dir = write_model_folder(source, "digits-mlp", identity_model(element_type), warmup=True)
        made[element_type, version] = package_model(
            model_dir, parse_semver(version), source / "package.tar.gz"
        )
    return made


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    root = tmp_path / "repository"
    root.mkdir()
    return root


def snapshot(root: Path) -> dict[str, str]:
    return {
        path.relative_to(root).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        if path.is_file()
        else "/"
        for path in sorted(root.rglob("*"))
    }


def package_config(package: Path) -> str:
    return (package.parent / "digits-mlp" / "config.pbtxt").read_text()


def test_interface_change_needs_a_higher_major(
    packages: dict[tuple[int, str], Path], repository: Path
) -> None:
    install_package(packages[FP32, "1.0.0"], repository)
    before = snapshot(repository)
    with pytest.raises(PackageError) as refusal:
        install_package(packages[FP64, "1.1.0"], repository)
    message = str(refusal.value)
    assert "changes the interface of served version 1 (MAJOR 1)" in message
    assert "release it as 2.0.0 or later" in message
    assert message.splitlines()[-2:] == [f"  {change}" for change in CHANGES]
    assert snapshot(repository) == before

    installed = install_package(packages[FP64, "2.0.0"], repository)
    assert (installed.version, installed.model_files_replaced) == (2, True)
    model_dir = repository / "digits-mlp"
    assert (model_dir / "config.pbtxt").read_text() == package_config(packages[FP64, "2.0.0"])
    assert "TYPE_FP64" in (model_dir / "config.pbtxt").read_text()
    assert (model_dir / "warmup" / "INPUT0").read_bytes() == bytes(8 * 4)  # four FP64 zeros, not FP32
    assert sorted(p.name for p in model_dir.iterdir()) == ["1", "2", "config.pbtxt", "warmup"]


def test_same_interface_keeps_the_operators_config(
    packages: dict[tuple[int, str], Path], repository: Path
) -> None:
    install_package(packages[FP32, "1.0.0"], repository)
    config = repository / "digits-mlp" / "config.pbtxt"
    tuned = config.read_text().replace(
        "dynamic_batching { }", "dynamic_batching { max_queue_delay_microseconds: 500 }"
    )
    config.write_text(tuned)
    installed = install_package(packages[FP32, "1.1.0"], repository)
    assert (installed.version, installed.model_files_replaced) == (2, False)
    assert config.read_text() == tuned


def test_model_without_config_takes_the_packages(
    packages: dict[tuple[int, str], Path], repository: Path
) -> None:
    install_package(packages[FP32, "1.0.0"], repository)
    (repository / "digits-mlp" / "config.pbtxt").unlink()
    assert install_package(packages[FP32, "1.1.0"], repository).model_files_replaced
    assert (repository / "digits-mlp" / "config.pbtxt").read_text() == package_config(packages[FP32, "1.1.0"])


def test_exported_version_counts_as_major_zero(
    packages: dict[tuple[int, str], Path], repository: Path
) -> None:
    write_model_folder(repository, "digits-mlp", identity_model(FP32))
    before = snapshot(repository)
    with pytest.raises(PackageError, match=r"served version 1 \(MAJOR 0\).*release it as 1\.0\.0"):
        install_package(packages[FP64, "0.9.0"], repository)
    assert snapshot(repository) == before
    assert install_package(packages[FP64, "1.1.0"], repository).version == 2


def test_served_version_without_metadata_has_an_unknown_interface(
    packages: dict[tuple[int, str], Path], repository: Path
) -> None:
    write_model_folder(repository, "digits-mlp", identity_model(FP32))
    (repository / "digits-mlp" / "1" / "metadata.json").unlink()
    with pytest.raises(
        PackageError, match=r"the served version has no metadata\.json, so its interface is unknown"
    ):
        install_package(packages[FP64, "0.9.0"], repository)
    assert install_package(packages[FP32, "1.1.0"], repository).model_files_replaced


def test_broken_served_metadata_is_refused(packages: dict[tuple[int, str], Path], repository: Path) -> None:
    write_model_folder(repository, "digits-mlp", identity_model(FP32))
    (repository / "digits-mlp" / "1" / "metadata.json").write_text("{")
    with pytest.raises(PackageError, match=r"served version 1 of 'digits-mlp' has a broken metadata\.json"):
        install_package(packages[FP32, "1.1.0"], repository)


def test_interface_change_must_become_the_newest_version(
    packages: dict[tuple[int, str], Path], repository: Path
) -> None:
    install_package(packages[FP32, "1.0.0"], repository, version=3)
    with pytest.raises(PackageError, match=r"must become the newest version \(above 3\)"):
        install_package(packages[FP64, "2.0.0"], repository, version=2)
    assert install_package(packages[FP32, "1.1.0"], repository, version=2).version == 2


def test_changes_list_added_removed_and_changed_tensors(tmp_path: Path) -> None:
    identity = read_metadata(write_model_folder(tmp_path, "a", identity_model(FP32)) / "1")
    add_sub = read_metadata(write_model_folder(tmp_path, "b", add_sub_model()) / "1")
    assert interface_changes(identity, add_sub) == [
        "input 'INPUT1' added: FP32 [-1, 16]",
        "output 'OUTPUT1' added: FP32 [-1, 16]",
        "input 'INPUT0': FP32 [-1, 4] -> FP32 [-1, 16]",
        "output 'OUTPUT0': FP32 [-1, 4] -> FP32 [-1, 16]",
    ]
    assert interface_changes(add_sub, identity)[:2] == [
        "input 'INPUT1' removed (was FP32 [-1, 16])",
        "output 'OUTPUT1' removed (was FP32 [-1, 16])",
    ]
    reordered = read_metadata(tmp_path / "b" / "1")
    reordered.inputs.reverse()
    assert reordered.interface() != add_sub.interface()
    assert interface_changes(add_sub, reordered) == []  # V2 callers address tensors by name
