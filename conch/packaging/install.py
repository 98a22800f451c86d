"""``conch install``: a verified package becomes the next numeric version of its model, atomically.

Two passes over the package. The first writes nothing: member types and paths, the unpacked size and
member count (see :mod:`conch.packaging.archive`), with a key the signature over ``metadata.json`` (see
:mod:`conch.packaging.signing`), ``metadata.json``, every file's sha256 against ``files`` and
``model_files`` (nothing unlisted), the model name and ``config.pbtxt``. Then the MAJOR rule (see
:mod:`conch.packaging.upgrade`). The second pass extracts into a hidden staging folder beside the
final place (same filesystem; ignored by ``conch serve``), checks the staged files again, and renames
them into place; the staging folder is removed whatever happens. So a refused package, early or late,
leaves the repository exactly as it was.

A package already installed (a version holding the same package version and the same files) is not
installed again: install says which version it is and changes nothing, unless forced to add a copy.
A notebook that reruns its install cell would otherwise add a version each time.

``config.pbtxt`` and ``warmup/`` come from the package for a new model, for a model without a
``config.pbtxt``, and when the interface changes (the old config would not describe the new graph).
Otherwise the operator's config, with whatever they tuned in it, stays.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from conch.core.errors import ConchError
from conch.packaging.archive import (
    PACKAGE_VERSION_FOLDER,
    SIGNATURE_FILENAME,
    PackageError,
    UnpackLimits,
    check_model_name,
    read_package,
)
from conch.packaging.metadata import (
    CONFIG_FILENAME,
    METADATA_FILENAME,
    MetadataError,
    ModelMetadata,
    mismatched_files,
    model_file_checksums,
    normalized_digest,
    read_metadata,
    sha256_chunks,
    version_file_checksums,
    write_metadata,
)
from conch.packaging.placing import place_staged_model
from conch.packaging.semver import SemVer, SemVerError, parse_semver
from conch.packaging.signing import key_id, verify_metadata
from conch.packaging.upgrade import check_upgrade
from conch.repository.config import parse_config
from conch.repository.version_policy import next_version, version_folders

_VERSION_PREFIX = f"{PACKAGE_VERSION_FOLDER}/"
_METADATA_PLACE = f"{_VERSION_PREFIX}{METADATA_FILENAME}"
_STAGING_PREFIX = ".conch-install-"


@dataclass(frozen=True)
class VerifiedPackage:
    """A package whose members, checksums and metadata passed every check."""

    path: Path
    metadata: ModelMetadata
    semver: SemVer
    limits: UnpackLimits
    #: The id of the key whose signature was checked; None when install was not asked to verify.
    verified_by: str | None = None


@dataclass(frozen=True)
class Installation:
    """What ``conch install`` did; ``model_files_replaced`` when the package's config.pbtxt and warmup/
    replaced an existing model's (a new model always takes them from the package)."""

    name: str
    package_version: str
    version: int
    version_dir: Path
    model_files_replaced: bool
    verified_by: str | None = None
    #: The package was installed already, as ``version``; nothing was written.
    already_installed: bool = False


def install_package(
    package: Path,
    repository: Path,
    version: int | None = None,
    limits: UnpackLimits | None = None,
    verify_key: Ed25519PublicKey | None = None,
    progress: Callable[[str], None] | None = None,
    force: bool = False,
) -> Installation:
    """Install ``package`` into ``repository`` as ``version`` (default: the next free number).

    A missing ``repository`` folder (whose parent exists) is created once the package is verified.
    With ``verify_key``, the package must be signed by it. ``progress`` hears each slow step.
    A package already installed is reported as such (``already_installed``) and not written again,
    unless ``force``.

    Raises :class:`PackageError` for a package that is refused; the repository is then unchanged.
    """
    report = progress or (lambda _step: None)
    checks = "member paths, sizes, checksums" + (", signature" if verify_key else "")
    report(f"verifying {package.name}: {checks}")
    verified = verify_package(package, limits, verify_key)
    name = verified.metadata.name
    model_dir = repository / name
    if model_dir.exists() and not model_dir.is_dir():
        raise PackageError(f"{model_dir} exists but is not a folder: move it away to install '{name}'")
    existing = version_folders(model_dir) if model_dir.is_dir() else []
    number = _version_number(model_dir, version)
    copy = None if force else installed_copy(model_dir, existing, verified.metadata)
    if copy is not None:
        return Installation(
            name, str(verified.semver), copy, model_dir / str(copy), False, verified.verified_by, True
        )
    from_package = check_upgrade(model_dir, existing, number, verified.metadata, verified.semver)
    replaced = from_package and model_dir.is_dir()
    try:
        repository.mkdir(exist_ok=True)  # a first install starts a repository; only a verified one
        report(f"unpacking {name} {verified.semver} as version {number}")
        _stage_and_commit(verified, model_dir, number, from_package)
    except OSError as exc:
        raise PackageError(
            f"could not install into {repository} ({exc}); the repository is unchanged"
        ) from None
    return Installation(
        name, str(verified.semver), number, model_dir / str(number), replaced, verified.verified_by
    )


def installed_copy(model_dir: Path, existing: list[int], metadata: ModelMetadata) -> int | None:
    """The version of ``model_dir`` that holds this package already (its package version and files),
    or None. A version whose metadata cannot be read holds no known package."""
    for number in existing:
        try:
            installed = read_metadata(model_dir / str(number))
        except (MetadataError, OSError, UnicodeDecodeError):
            continue
        if installed.package_version == metadata.package_version and _digests(installed.files) == _digests(
            metadata.files
        ):
            return number
    return None


def _digests(files: dict[str, str]) -> dict[str, str]:
    return {name: normalized_digest(digest) for name, digest in files.items()}


def verify_package(
    path: Path, limits: UnpackLimits | None = None, verify_key: Ed25519PublicKey | None = None
) -> VerifiedPackage:
    """Read the whole package and check it, writing nothing; raises :class:`PackageError` if refused."""
    limits = limits or UnpackLimits()
    top, digests, small_files = _read_package(path, limits)
    metadata_bytes = small_files.get(_METADATA_PLACE)
    metadata, semver = _package_metadata(metadata_bytes, path)
    if verify_key is not None and metadata_bytes is not None:
        verify_metadata(metadata_bytes, small_files.get(SIGNATURE_FILENAME), verify_key, path.name)
    check_model_name(metadata.name)
    if top != metadata.name:
        raise PackageError(
            f"{path.name} holds folder '{top}' but its {METADATA_FILENAME} names model '{metadata.name}'"
        )
    version_files = {
        p.removeprefix(_VERSION_PREFIX): d
        for p, d in digests.items()
        if p.startswith(_VERSION_PREFIX) and p != _METADATA_PLACE
    }
    model_files = {p: d for p, d in digests.items() if not p.startswith(_VERSION_PREFIX)}
    _refuse_mismatches(metadata, version_files, model_files, f"{path.name} fails its checksums")
    _check_config(small_files.get(CONFIG_FILENAME), metadata.name)
    verified_by = key_id(verify_key) if verify_key is not None else None
    return VerifiedPackage(path, metadata, semver, limits, verified_by)


def _read_package(path: Path, limits: UnpackLimits) -> tuple[str, dict[str, str], dict[str, bytes]]:
    """The top folder, each file's sha256 by place, and the bytes of metadata.json, config.pbtxt and
    signature.json (which the metadata does not list: it signs the metadata)."""
    top = ""
    digests: dict[str, str] = {}
    small_files: dict[str, bytes] = {}
    with read_package(path, limits) as members:
        for member in members:
            top = member.top
            if member.content is None:
                continue
            place = member.place.as_posix()
            if place == SIGNATURE_FILENAME:
                small_files[place] = b"".join(member.chunks())
            elif place in (_METADATA_PLACE, CONFIG_FILENAME):
                small_files[place] = b"".join(member.chunks())
                digests[place] = sha256_chunks([small_files[place]])
            else:
                digests[place] = sha256_chunks(member.chunks())
    return top, digests, small_files


def _package_metadata(text: bytes | None, path: Path) -> tuple[ModelMetadata, SemVer]:
    if text is None:
        raise PackageError(
            f"{path.name} has no <model>/{_METADATA_PLACE}: make packages with `conch package`"
        )
    try:
        metadata = ModelMetadata.from_json(text.decode("utf-8"))
    except (MetadataError, UnicodeDecodeError) as exc:
        raise PackageError(f"{path.name}: {exc}") from None
    if metadata.package_version is None:
        raise PackageError(
            f"{path.name}: {METADATA_FILENAME} has no package_version: make it with `conch package`"
        )
    try:
        return metadata, parse_semver(metadata.package_version)
    except SemVerError as exc:
        raise PackageError(f"{path.name}: {METADATA_FILENAME} field 'package_version': {exc}") from None


def _refuse_mismatches(
    metadata: ModelMetadata, version_files: dict[str, str], model_files: dict[str, str], what: str
) -> None:
    problems = {
        f"{_VERSION_PREFIX}{name}": problem
        for name, problem in mismatched_files(metadata.files, version_files).items()
    }
    problems.update(mismatched_files(metadata.model_files, model_files))
    if problems:
        lines = "\n".join(f"  {name}: {problem}" for name, problem in sorted(problems.items()))
        raise PackageError(f"{what} (it was changed or damaged after `conch package`):\n{lines}")


def _check_config(text: bytes | None, name: str) -> None:
    if text is None:
        raise PackageError(f"the package has no {name}/{CONFIG_FILENAME}: make packages with `conch package`")
    try:
        config = parse_config(text.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise PackageError(f"{CONFIG_FILENAME} in the package is not UTF-8 text ({exc})") from None
    except ConchError as exc:
        raise PackageError(f"{CONFIG_FILENAME} in the package: {exc.message}") from None
    if config.name not in ("", name):
        raise PackageError(f"{CONFIG_FILENAME} in the package names model '{config.name}', not '{name}'")


def _version_number(model_dir: Path, wanted: int | None) -> int:
    free = next_version(model_dir)
    if wanted is None:
        return free
    if wanted < 1:
        raise PackageError(f"version {wanted} is not a version number: use 1 or more")
    if (model_dir / str(wanted)).exists():
        raise PackageError(
            f"version {wanted} of model '{model_dir.name}' already exists: choose another --version, "
            f"or leave it out to install as version {free}"
        )
    return wanted


def _stage_and_commit(verified: VerifiedPackage, model_dir: Path, number: int, from_package: bool) -> None:
    # Staged beside its final place: in the model folder, which may be a link to other storage, or
    # for a new model in the repository; either way on the same filesystem, so renames are atomic.
    where = model_dir if model_dir.is_dir() else model_dir.parent
    staging = Path(tempfile.mkdtemp(prefix=_STAGING_PREFIX, dir=where))
    try:
        staged = staging / verified.metadata.name
        _extract(verified, staged)
        staged_version = staged / PACKAGE_VERSION_FOLDER
        _refuse_mismatches(
            verified.metadata,
            version_file_checksums(staged_version),
            model_file_checksums(staged),
            f"{verified.path.name} changed while it was installed",
        )
        write_metadata(staged_version, dataclasses.replace(verified.metadata, version=number))
        staged_version.rename(staged / str(number))
        place_staged_model(staged, model_dir, str(number), from_package, trash=staging)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _extract(verified: VerifiedPackage, staged: Path) -> None:
    """Write the package's members under ``staged``; only plain files and folders, never a link, and
    not the signature, whose work is done."""
    staged.mkdir()
    with read_package(verified.path, verified.limits) as members:
        for member in members:
            if member.top != verified.metadata.name:
                raise PackageError(f"{verified.path.name} changed while it was installed")
            if member.place.as_posix() == SIGNATURE_FILENAME:
                continue
            target = staged.joinpath(*member.place.parts)
            if member.content is None:
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with target.open("xb") as out:
                for chunk in member.chunks():
                    out.write(chunk)
