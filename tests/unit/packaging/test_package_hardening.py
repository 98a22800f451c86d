"""Decompression bombs, old checksums and signatures: what ``conch install`` refuses, writing nothing.

The hostile packages start from a real one and are rewritten with ``tarfile``, as in test_install.py.
"""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)
from onnx import TensorProto

from conch.packaging.archive import PackageError, UnpackLimits
from conch.packaging.install import install_package
from conch.packaging.metadata import ModelMetadata, read_metadata, sha256_chunks
from conch.packaging.package import package_model
from conch.packaging.semver import parse_semver
from conch.packaging.signing import key_id, load_signing_key, load_verify_key
from tests.fixtures.model_folders import write_model_folder
from tests.fixtures.onnx_models import identity_model
from tests.unit.packaging.test_install import (
    MODEL,
    Member,
    data_of,
    member,
    rebuild,
    refused,
    replace_data,
    tree,
)

METADATA = "digits-mlp/1/metadata.json"
SIGNATURE = "digits-mlp/signature.json"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = tmp_path_factory.mktemp("source")
    return write_model_folder(source, "digits-mlp", identity_model(TensorProto.FLOAT), warmup=True)


@pytest.fixture(scope="module")
def package(model_dir: Path) -> Path:
    return package_model(model_dir, parse_semver("1.0.0"), model_dir.parent / "digits-mlp-v1.0.0.tar.gz")


@pytest.fixture(scope="module")
def key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


@pytest.fixture(scope="module")
def signed(model_dir: Path, key: Ed25519PrivateKey) -> Path:
    target = model_dir.parent / "digits-mlp-v1.0.0-signed.tar.gz"
    return package_model(model_dir, parse_semver("1.0.0"), target, sign_key=key)


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    root = tmp_path / "repository"
    root.mkdir()
    return root


def write_tar(target: Path, members: list[Member]) -> Path:
    with tarfile.open(target, "w:gz", format=tarfile.PAX_FORMAT) as archive:
        for info, data in members:
            archive.addfile(info, io.BytesIO(data) if data is not None else None)
    return target


def test_a_member_that_unpacks_beyond_the_cap_is_refused_before_it_is_read(
    package: Path, repository: Path, tmp_path: Path
) -> None:
    zeros = bytes(64 << 20)  # 64 MiB of zeros: about 64 KiB of gzip
    bomb = rebuild(package, tmp_path / "bomb.tar.gz", lambda m: replace_data(m, MODEL, zeros))
    assert bomb.stat().st_size < 1 << 20
    limits = UnpackLimits(max_unpacked_bytes=1 << 20)
    message = r"unpacks to more than 1048576 bytes, reached at member 'digits-mlp/1/model.onnx'"
    with pytest.raises(PackageError, match=message):
        install_package(bomb, repository, limits=limits)
    assert tree(repository) == {}


def test_too_many_members_is_refused_and_nothing_written(
    package: Path, repository: Path, tmp_path: Path
) -> None:
    def many(members: list[Member]) -> None:
        members.extend(member(f"digits-mlp/1/empty-{i}", b"") for i in range(200))

    bomb = rebuild(package, tmp_path / "many.tar.gz", many)
    with pytest.raises(PackageError, match="more than 50 members"):
        install_package(bomb, repository, limits=UnpackLimits(max_members=50))
    assert tree(repository) == {}


def test_default_limits_refuse_a_bomb_and_leave_a_served_model_untouched(
    package: Path, repository: Path, tmp_path: Path
) -> None:
    def many(members: list[Member]) -> None:
        members.extend(member(f"digits-mlp/1/empty-{i}", b"") for i in range(10_001))

    refused(rebuild(package, tmp_path / "many.tar.gz", many), package, repository, "more than 10000 members")


def test_a_huge_pax_header_is_refused_by_the_stream_cap(repository: Path, tmp_path: Path) -> None:
    # tarfile reads a PAX header whole, so the cap must also hold on the decompressed stream itself.
    info = tarfile.TarInfo("digits-mlp/config.pbtxt")
    info.pax_headers = {"comment": "x" * (4 << 20)}
    bomb = write_tar(tmp_path / "pax.tar.gz", [(info, b"")])
    limits = UnpackLimits(max_unpacked_bytes=1 << 20, max_members=10)
    with pytest.raises(PackageError, match=r"tar stream \(a decompression bomb\?\)"):
        install_package(bomb, repository, limits=limits)
    assert tree(repository) == {}


def test_a_package_with_bare_hex_checksums_still_installs(
    package: Path, repository: Path, tmp_path: Path
) -> None:
    def bare(members: list[Member]) -> None:
        metadata = ModelMetadata.from_json(data_of(members, METADATA).decode())
        digests = [*metadata.files.values(), *metadata.model_files.values()]
        assert all(d.startswith("sha256:") for d in digests)
        metadata.files = {k: v.removeprefix("sha256:") for k, v in metadata.files.items()}
        metadata.model_files = {k: v.removeprefix("sha256:") for k, v in metadata.model_files.items()}
        replace_data(members, METADATA, metadata.to_json().encode())

    old = rebuild(package, tmp_path / "old.tar.gz", bare)
    installed = install_package(old, repository)
    assert read_metadata(installed.version_dir).files["model.onnx"].isalnum()


def test_an_unknown_checksum_algorithm_is_refused(package: Path, repository: Path, tmp_path: Path) -> None:
    def md5(members: list[Member]) -> None:
        metadata = ModelMetadata.from_json(data_of(members, METADATA).decode())
        metadata.files = {"model.onnx": "md5:" + "0" * 32}
        replace_data(members, METADATA, metadata.to_json().encode())

    other = rebuild(package, tmp_path / "md5.tar.gz", md5)
    refused(other, package, repository, "checksum algorithm 'md5' is not supported")


def test_signed_package_verifies_and_the_signature_is_not_installed(
    signed: Path, key: Ed25519PrivateKey, repository: Path
) -> None:
    installed = install_package(signed, repository, verify_key=key.public_key())
    assert installed.verified_by == key_id(key.public_key())
    assert "digits-mlp/signature.json" not in tree(repository)
    assert install_package(signed, repository).verified_by is None  # without --verify it installs too


def test_signing_keeps_packages_reproducible(model_dir: Path, key: Ed25519PrivateKey, tmp_path: Path) -> None:
    first = package_model(model_dir, parse_semver("1.0.0"), tmp_path / "a.tar.gz", sign_key=key)
    second = package_model(model_dir, parse_semver("1.0.0"), tmp_path / "b.tar.gz", sign_key=key)
    assert first.read_bytes() == second.read_bytes()


def test_tampered_bytes_of_a_signed_package_are_refused(
    signed: Path, key: Ed25519PrivateKey, repository: Path, tmp_path: Path
) -> None:
    edit = lambda m: replace_data(m, MODEL, data_of(m, MODEL)[:-1] + b"\x00")  # noqa: E731
    tampered = rebuild(signed, tmp_path / "bytes.tar.gz", edit)
    with pytest.raises(PackageError, match=r"1/model\.onnx: sha256 differs"):
        install_package(tampered, repository, verify_key=key.public_key())
    assert tree(repository) == {}


def test_tampered_metadata_of_a_signed_package_is_refused(
    signed: Path, key: Ed25519PrivateKey, repository: Path, tmp_path: Path
) -> None:
    # The forger rewrites the model and its checksum: consistent, but no longer what was signed.
    forged = identity_model(TensorProto.FLOAT).SerializeToString() + b"\x00"

    def forge(members: list[Member]) -> None:
        replace_data(members, MODEL, forged)
        metadata = ModelMetadata.from_json(data_of(members, METADATA).decode())
        metadata.files = {"model.onnx": sha256_chunks([forged])}
        replace_data(members, METADATA, metadata.to_json().encode())

    tampered = rebuild(signed, tmp_path / "metadata.tar.gz", forge)
    install_package(tampered, tmp_path / "unverified")  # the checksums alone cannot tell
    with pytest.raises(PackageError, match=r"signature does not match its metadata\.json"):
        install_package(tampered, repository, verify_key=key.public_key())
    assert tree(repository) == {}


def test_wrong_key_is_refused(signed: Path, repository: Path) -> None:
    other = Ed25519PrivateKey.generate().public_key()
    with pytest.raises(PackageError, match=f"is signed by key {key_id_of(signed)}, not by the key given"):
        install_package(signed, repository, verify_key=other)
    assert tree(repository) == {}


def key_id_of(package: Path) -> str:
    with tarfile.open(package, "r:gz") as archive:
        text = archive.extractfile(SIGNATURE).read()  # type: ignore[union-attr]
    return str(json.loads(text)["key_id"])


def test_a_forged_key_id_with_a_wrong_key_is_still_refused(
    signed: Path, repository: Path, tmp_path: Path
) -> None:
    other = Ed25519PrivateKey.generate()

    def claim(members: list[Member]) -> None:
        text = data_of(members, SIGNATURE).decode().replace(key_id_of(signed), key_id(other.public_key()))
        replace_data(members, SIGNATURE, text.encode())

    forged = rebuild(signed, tmp_path / "claim.tar.gz", claim)
    with pytest.raises(PackageError, match="signature does not match"):
        install_package(forged, repository, verify_key=other.public_key())


def test_verify_on_an_unsigned_package_is_refused(
    package: Path, key: Ed25519PrivateKey, repository: Path
) -> None:
    with pytest.raises(PackageError, match="is not signed, and --verify asks for a signature"):
        install_package(package, repository, verify_key=key.public_key())
    assert tree(repository) == {}


def test_keys_load_from_pem_and_other_kinds_are_refused(key: Ed25519PrivateKey, tmp_path: Path) -> None:
    private = tmp_path / "key.pem"
    private.write_bytes(key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()))
    public = tmp_path / "key.pub.pem"
    public.write_bytes(key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo))
    assert key_id(load_signing_key(private).public_key()) == key_id(load_verify_key(public))
    with pytest.raises(PackageError, match="as a PEM public key"):
        load_verify_key(private)
    garbage = tmp_path / "garbage.pem"
    garbage.write_bytes(gzip.compress(b"not a key"))
    with pytest.raises(PackageError, match="as a PEM private key"):
        load_signing_key(garbage)
