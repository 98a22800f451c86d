"""Checks of a version's ``metadata.json`` (format: :mod:`conch.packaging.metadata`).

- Missing: info. A hand-made model can still be served; ``conch export`` writes the file.
- Malformed: error. Packaging and installing rely on it.
- ``files`` (the version folder's own files) differ: error, the model file was changed or corrupted.
- ``contract.yaml`` differs: warning, the data contract is meant to be edited by hand.
- ``model_files`` (``config.pbtxt``, ``warmup/*``) differ: warning, operators tune ``config.pbtxt``.
- ``name`` or ``version`` not the folder's: warning, the folder was probably copied by hand.
"""

from __future__ import annotations

from pathlib import Path

from conch.core.contracts import CONTRACT_FILENAME
from conch.core.findings import Finding, Severity
from conch.packaging.metadata import (
    METADATA_FILENAME,
    MetadataError,
    mismatched_files,
    model_file_checksums,
    read_metadata,
    version_file_checksums,
)


def metadata_findings(model_dir: Path, number: int, model: str) -> list[Finding]:
    """What is wrong with ``<model>/<number>/metadata.json`` and the files it lists."""
    version_dir = model_dir / str(number)
    field = f"{number}/{METADATA_FILENAME}"
    if not (version_dir / METADATA_FILENAME).is_file():
        return [
            Finding(
                "metadata-missing",
                Severity.INFO,
                model,
                field,
                f"no {METADATA_FILENAME}, so the version's origin and checksums are unknown",
                "conch export writes it; it is needed to package the model",
            )
        ]
    try:
        metadata = read_metadata(version_dir)
    except MetadataError as exc:
        return [
            Finding(
                "metadata-malformed",
                Severity.ERROR,
                model,
                field,
                str(exc),
                "export the model again with conch export, or fix the field named in the message",
            )
        ]
    found = [
        Finding(
            "metadata-checksum-mismatch",
            Severity.ERROR,
            model,
            f"{number}/{name}",
            f"{name}: {problem} (checked against {METADATA_FILENAME} 'files')",
            "the version's files changed after export: restore them from the package, or export again",
        )
        if name != CONTRACT_FILENAME
        else Finding(
            "metadata-contract-changed",
            Severity.WARNING,
            model,
            f"{number}/{name}",
            f"{name}: {problem} (checked against {METADATA_FILENAME} 'files')",
            "expected when the data contract was edited by hand; conch package records the new checksum",
        )
        for name, problem in mismatched_files(metadata.files, version_file_checksums(version_dir)).items()
    ]
    found += [
        Finding(
            "metadata-config-changed",
            Severity.WARNING,
            model,
            name,
            f"{name}: {problem} (checked against {METADATA_FILENAME} 'model_files')",
            "expected when an operator tuned the config; conch package records the new checksums",
        )
        for name, problem in mismatched_files(metadata.model_files, model_file_checksums(model_dir)).items()
    ]
    if (metadata.name, metadata.version) != (model, number):
        found.append(
            Finding(
                "metadata-identity-mismatch",
                Severity.WARNING,
                model,
                field,
                f"{METADATA_FILENAME} describes '{metadata.name}' version {metadata.version}, but it is in "
                f"'{model}' version {number}",
                "install versions with conch install, which records where they went, rather than copying "
                "folders",
            )
        )
    return found
