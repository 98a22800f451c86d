"""The MAJOR rule: a package may change what callers send and receive only with a higher SemVer MAJOR.

The interface is what ``ModelMetadata.interface()`` lists: each input's and output's name, datatype and
shape. V2 callers address tensors by name, so the comparison is by (role, name), not by position. It is
made against the version being served, the highest numeric version folder of the model.

A served version with no ``package_version`` (it came from ``conch export``) counts as MAJOR 0; a served
version with no ``metadata.json`` at all has an unknown interface, which counts as changed. Both mean
that a package changing the interface there needs MAJOR 1 or more. 0.y.z gets no exemption: the rule is
about callers, and callers of a 0.y.z model break just the same.
"""

from __future__ import annotations

from pathlib import Path

from conch.packaging.archive import PackageError
from conch.packaging.metadata import (
    CONFIG_FILENAME,
    METADATA_FILENAME,
    MetadataError,
    ModelMetadata,
    read_metadata,
)
from conch.packaging.semver import SemVer, SemVerError, parse_semver

_TensorsByName = dict[tuple[str, str], tuple[str, tuple[str, ...]]]


def check_upgrade(
    model_dir: Path, existing: list[int], number: int, package: ModelMetadata, semver: SemVer
) -> bool:
    """Refuse an interface change without a higher MAJOR; returns whether the model files must change.

    ``existing`` are the model's numeric versions and ``number`` the one being installed. The answer is
    True when config.pbtxt (and warm-up files) must come from the package: the interface changed, or
    the model has no config.pbtxt of its own.
    """
    has_config = (model_dir / CONFIG_FILENAME).is_file()
    if not existing:
        return not has_config
    served_number = existing[-1]
    served = _served_metadata(model_dir / str(served_number))
    changes = interface_changes(served, package)
    if not changes:
        return not has_config
    served_major = _served_major(served, served_number)
    if semver.major <= served_major:
        listed = "\n".join(f"  {change}" for change in changes)
        raise PackageError(
            f"{package.name} {semver} changes the interface of served version {served_number} "
            f"(MAJOR {served_major}), so callers must change: release it as {served_major + 1}.0.0 "
            f"or later to install it. What changed:\n{listed}"
        )
    if number < served_number:
        raise PackageError(
            f"{package.name} {semver} changes the interface, so it must become the newest version "
            f"(above {served_number}): leave out --version"
        )
    return True


def interface_changes(served: ModelMetadata | None, package: ModelMetadata) -> list[str]:
    """One line per input or output added, removed or changed; empty when callers see no difference."""
    if served is None:
        return [f"the served version has no {METADATA_FILENAME}, so its interface is unknown"]
    before, after = _signature(served), _signature(package)
    changes = [
        f"{role} '{name}' removed (was {_describe(before[role, name])})"
        for role, name in sorted(before.keys() - after.keys())
    ]
    changes += [
        f"{role} '{name}' added: {_describe(after[role, name])}"
        for role, name in sorted(after.keys() - before.keys())
    ]
    changes += [
        f"{role} '{name}': {_describe(before[role, name])} -> {_describe(after[role, name])}"
        for role, name in sorted(before.keys() & after.keys())
        if before[role, name] != after[role, name]
    ]
    return changes


def _signature(metadata: ModelMetadata) -> _TensorsByName:
    return {(role, name): (datatype, tuple(shape)) for role, name, datatype, *shape in metadata.interface()}


def _describe(tensor: tuple[str, tuple[str, ...]]) -> str:
    datatype, shape = tensor
    return f"{datatype} [{', '.join(shape)}]"


def _served_metadata(version_dir: Path) -> ModelMetadata | None:
    if not (version_dir / METADATA_FILENAME).is_file():
        return None
    try:
        return read_metadata(version_dir)
    except MetadataError as exc:
        raise PackageError(
            f"served version {version_dir.name} of '{version_dir.parent.name}' has a broken "
            f"{METADATA_FILENAME} ({exc}), so the package cannot be compared with it: fix or remove it"
        ) from None


def _served_major(served: ModelMetadata | None, number: int) -> int:
    if served is None or served.package_version is None:
        return 0
    try:
        return parse_semver(served.package_version).major
    except SemVerError as exc:
        raise PackageError(
            f"served version {number}: {METADATA_FILENAME} field 'package_version': {exc}"
        ) from None
