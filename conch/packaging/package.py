"""``conch package``: one validated model version becomes a reproducible ``<name>-v<version>.tar.gz``.

Only a version that ``conch export`` made (it has a ``metadata.json``) and that passes ``conch validate``
is packaged: a package is the unit an operator installs without looking inside, so it must carry its own
proof of what it is. The packaged ``metadata.json`` gets the SemVer ``package_version`` and checksums
recomputed over exactly the files in the package; see :mod:`conch.packaging.archive` for the layout.
With a key, the package also carries a signature over that ``metadata.json`` (see
:mod:`conch.packaging.signing`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from conch.packaging.archive import (
    PACKAGE_VERSION_FOLDER,
    SIGNATURE_FILENAME,
    PackageError,
    check_model_name,
    package_members,
    write_package,
)
from conch.packaging.metadata import (
    CONFIG_FILENAME,
    METADATA_FILENAME,
    WARMUP_FOLDER,
    MetadataError,
    ModelMetadata,
    model_file_checksums,
    read_metadata,
    version_file_checksums,
)
from conch.packaging.semver import SemVer
from conch.packaging.signing import sign_metadata
from conch.repository.version_policy import version_folders
from conch.validation import validate_model
from conch.validation.validator import Progress


def package_file_name(name: str, version: SemVer) -> str:
    """``digits-mlp-v2.1.0.tar.gz``: the default name of a package."""
    return f"{name}-v{version}.tar.gz"


def package_model(
    model_dir: Path,
    version: SemVer,
    output: Path | None = None,
    model_version: int | None = None,
    sign_key: Ed25519PrivateKey | None = None,
    progress: Progress | None = None,
) -> Path:
    """Package ``model_version`` (default: the highest) of the model in ``model_dir``; returns the file.

    ``output`` defaults to :func:`package_file_name` in the current folder; with ``sign_key`` the
    package is signed; ``progress`` hears each slow step (validation's included). Raises
    :class:`PackageError` for a model that cannot be packaged, before anything is written.
    """
    report = progress or _silent
    name = model_dir.resolve().name
    check_model_name(name)
    version_dir = model_dir / str(_version_to_package(model_dir, model_version))
    metadata = _exported_metadata(version_dir, name)
    if not (model_dir / CONFIG_FILENAME).is_file():
        raise PackageError(f"model '{name}' has no {CONFIG_FILENAME}: make the model with `conch export`")
    _refuse_links(model_dir, version_dir)
    _refuse_invalid(model_dir, report)
    report(f"{name} {version_dir.name}: checksums")
    packaged = dataclasses.replace(
        metadata,
        version=int(PACKAGE_VERSION_FOLDER),
        package_version=str(version),
        files=version_file_checksums(version_dir),
        model_files=model_file_checksums(model_dir),
    )
    target = output or Path.cwd() / package_file_name(name, version)
    try:
        files = _package_files(model_dir, version_dir, packaged, sign_key)
        report(f"{name} {version_dir.name}: writing {target}")
        write_package(target, package_members(files, name))
    except OSError as exc:
        raise PackageError(f"could not write {target} ({exc})") from None
    return target


def _version_to_package(model_dir: Path, wanted: int | None) -> int:
    available = version_folders(model_dir)
    if not available:
        raise PackageError(f"model '{model_dir.name}' has no numeric version folder to package")
    if wanted is None:
        return available[-1]
    if wanted not in available:
        raise PackageError(
            f"model '{model_dir.name}' has no version {wanted}; it has {', '.join(map(str, available))}"
        )
    return wanted


def _exported_metadata(version_dir: Path, name: str) -> ModelMetadata:
    if not (version_dir / METADATA_FILENAME).is_file():
        raise PackageError(
            f"version {version_dir.name} of model '{name}' has no {METADATA_FILENAME}, so it cannot say "
            "what it is: make the version with `conch export`"
        )
    try:
        metadata = read_metadata(version_dir)
    except MetadataError as exc:
        raise PackageError(f"version {version_dir.name} of model '{name}': {exc}") from None
    if metadata.name != name:
        raise PackageError(
            f"{METADATA_FILENAME} of version {version_dir.name} names model '{metadata.name}' but its "
            f"folder is '{name}': rename the folder or re-export the model"
        )
    return metadata


def _refuse_links(model_dir: Path, version_dir: Path) -> None:
    # The checksums (and so the package) cover regular files only: a linked model.onnx would be left out.
    candidates = [
        model_dir / CONFIG_FILENAME,
        *(model_dir / WARMUP_FOLDER).rglob("*"),
        *version_dir.rglob("*"),
    ]
    links = [path.relative_to(model_dir).as_posix() for path in candidates if path.is_symlink()]
    if links:
        raise PackageError(
            f"model '{model_dir.name}' holds links ({', '.join(links)}): a package holds regular files "
            "only, so replace each link with the file it points to"
        )


def _silent(_step: str) -> None:
    pass


def _refuse_invalid(model_dir: Path, progress: Progress) -> None:
    errors = [finding for finding in validate_model(model_dir, progress) if finding.is_error]
    if errors:
        lines = [f"  {f.code} {f.field}: {f.message} ({f.hint})" for f in errors]
        raise PackageError(
            f"model '{model_dir.name}' fails validation, so it is not packaged:\n"
            + "\n".join(lines)
            + f"\nfix these, then check with `conch validate {model_dir}`"
        )


def _package_files(
    model_dir: Path, version_dir: Path, packaged: ModelMetadata, sign_key: Ed25519PrivateKey | None
) -> list[tuple[str, Path | bytes]]:
    """Each file's place under the package's top folder and where its bytes come from."""
    files: list[tuple[str, Path | bytes]] = [(place, model_dir / place) for place in packaged.model_files]
    files += [(f"{PACKAGE_VERSION_FOLDER}/{place}", version_dir / place) for place in packaged.files]
    metadata = packaged.to_json().encode("utf-8")
    files.append((f"{PACKAGE_VERSION_FOLDER}/{METADATA_FILENAME}", metadata))
    if sign_key is not None:
        files.append((SIGNATURE_FILENAME, sign_metadata(metadata, sign_key).to_json()))
    return files
