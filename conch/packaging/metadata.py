"""``metadata.json``: what a model version is, where it came from, and the sha256 of its files.

One file per version folder (``<model>/<version>/metadata.json``), written by ``conch.export``,
completed by ``conch package`` (its SemVer) and ``conch install`` (its numeric version), and checked by
``conch validate``. Two checksum maps, because a model folder has two kinds of file:

- ``files``: the version folder's own files (``model.onnx``...), keyed relative to the version folder.
  They never change after export; a mismatch means tampering or corruption.
- ``model_files``: the model-level files the version was made with (``config.pbtxt`` and
  ``warmup/*``), keyed relative to the model folder. An operator may tune ``config.pbtxt`` later, so
  for a served model a mismatch here is worth a warning, while a package must match exactly.

Each checksum names its algorithm, ``sha256:<hex>``, as OCI digests do, so that a later algorithm can
be told from this one; a bare hex digest (what conch wrote before) is read as sha256.

The JSON is written with sorted keys and a fixed layout so that the same metadata gives the same bytes
(packages are reproducible).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from conch.repository.warmup import WARMUP_FOLDER

METADATA_FILENAME = "metadata.json"
DIGEST_ALGORITHM = "sha256"
_BARE_SHA256 = re.compile(r"[0-9a-fA-F]{64}")
METADATA_FORMAT = "conch.model-metadata/1"
CONFIG_FILENAME = "config.pbtxt"


class MetadataError(ValueError):
    """``metadata.json`` is missing, not JSON, or lacks a field; the message names the field."""


@dataclass(frozen=True)
class TensorSchema:
    """One input or output as callers see it: V2 datatype and full shape (-1 for a dynamic axis)."""

    name: str
    datatype: str
    shape: list[int]


@dataclass
class ModelMetadata:
    """The contents of ``metadata.json``. ``package_version`` is SemVer, set by ``conch package``."""

    name: str
    version: int
    created: str
    framework: dict[str, str]
    libraries: dict[str, str]
    inputs: list[TensorSchema]
    outputs: list[TensorSchema]
    feature_names: list[str] | None = None
    #: DataFrame columns whose tensor name differs from the column's (``conch.exporting.column_names``).
    column_inputs: dict[str, str] = field(default_factory=dict)
    #: A classifier's classes by output, in the order of that output's values (``exporting.class_labels``).
    classes: dict[str, list[Any]] = field(default_factory=dict)
    training_data_version: str | None = None
    package_version: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    model_files: dict[str, str] = field(default_factory=dict)

    def interface(self) -> tuple[tuple[str, ...], ...]:
        """Names, datatypes and shapes of inputs then outputs: what callers depend on."""
        return tuple(
            (role, t.name, t.datatype, *map(str, t.shape))
            for role, tensors in (("input", self.inputs), ("output", self.outputs))
            for t in tensors
        )

    def to_json(self) -> str:
        body = {"format": METADATA_FORMAT, **asdict(self)}
        return json.dumps(body, indent=2, sort_keys=True, ensure_ascii=False) + "\n"

    @classmethod
    def from_json(cls, text: str) -> ModelMetadata:
        try:
            body = json.loads(text)
        except json.JSONDecodeError as exc:
            raise MetadataError(f"{METADATA_FILENAME} is not valid JSON: {exc}") from None
        if not isinstance(body, dict):
            raise MetadataError(f"{METADATA_FILENAME} must hold a JSON object")
        if body.get("format") != METADATA_FORMAT:
            raise MetadataError(f"{METADATA_FILENAME} field 'format' must be '{METADATA_FORMAT}'")
        try:
            return cls(
                name=_field(body, "name", str),
                version=_field(body, "version", int),
                created=_field(body, "created", str),
                framework=_field(body, "framework", dict),
                libraries=_field(body, "libraries", dict),
                inputs=_tensors(body, "inputs"),
                outputs=_tensors(body, "outputs"),
                feature_names=_optional(body, "feature_names", list),
                column_inputs=_optional(body, "column_inputs", dict) or {},
                classes=_optional(body, "classes", dict) or {},
                training_data_version=_optional(body, "training_data_version", str),
                package_version=_optional(body, "package_version", str),
                extra=_optional(body, "extra", dict) or {},
                files=_field(body, "files", dict),
                model_files=_optional(body, "model_files", dict) or {},
            )
        except (TypeError, KeyError) as exc:
            raise MetadataError(f"{METADATA_FILENAME}: {exc}") from None


def _field(body: dict[str, Any], name: str, kind: type) -> Any:
    if name not in body:
        raise MetadataError(f"{METADATA_FILENAME} has no field '{name}'")
    value = body[name]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise MetadataError(f"{METADATA_FILENAME} field '{name}' must be a {kind.__name__}")
    return value


def _optional(body: dict[str, Any], name: str, kind: type) -> Any:
    return None if body.get(name) is None else _field(body, name, kind)


def _tensors(body: dict[str, Any], name: str) -> list[TensorSchema]:
    tensors = []
    for index, entry in enumerate(_field(body, name, list)):
        where = f"{name}[{index}]"
        if not isinstance(entry, dict):
            raise MetadataError(f"{METADATA_FILENAME} field '{where}' must be an object")
        shape = entry.get("shape")
        if not isinstance(shape, list) or not all(isinstance(d, int) for d in shape):
            raise MetadataError(f"{METADATA_FILENAME} field '{where}.shape' must be a list of integers")
        tensors.append(
            TensorSchema(
                name=_field(entry, "name", str), datatype=_field(entry, "datatype", str), shape=shape
            )
        )
    return tensors


def sha256_chunks(chunks: Iterable[bytes]) -> str:
    """``sha256:<hex>`` of data read in pieces (a file, a tar member), so no file is held whole in memory."""
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk)
    return f"{DIGEST_ALGORITHM}:{digest.hexdigest()}"


def sha256_file(path: Path) -> str:
    with path.open("rb") as stream:
        return sha256_chunks(iter(lambda: stream.read(1 << 20), b""))


def normalized_digest(digest: str) -> str:
    """``digest`` with its algorithm named: a bare 64-digit hex (older metadata) is sha256."""
    if ":" not in digest and _BARE_SHA256.fullmatch(digest):
        return f"{DIGEST_ALGORITHM}:{digest.lower()}"
    return digest


def version_file_checksums(version_dir: Path) -> dict[str, str]:
    """sha256 of every regular file under the version folder except ``metadata.json``."""
    return {
        path.relative_to(version_dir).as_posix(): sha256_file(path)
        for path in sorted(version_dir.rglob("*"))
        if path.is_file() and not path.is_symlink() and path.name != METADATA_FILENAME
    }


def model_file_checksums(model_dir: Path) -> dict[str, str]:
    """sha256 of ``config.pbtxt`` and every file under ``warmup/`` in the model folder."""
    paths = [model_dir / CONFIG_FILENAME, *sorted((model_dir / WARMUP_FOLDER).rglob("*"))]
    return {
        path.relative_to(model_dir).as_posix(): sha256_file(path)
        for path in paths
        if path.is_file() and not path.is_symlink()
    }


def mismatched_files(expected: dict[str, str], actual: dict[str, str]) -> dict[str, str]:
    """Each file whose checksum differs, is missing or is unlisted, with what is wrong with it."""
    problems = {}
    for name in sorted(expected.keys() | actual.keys()):
        if name not in actual:
            problems[name] = "listed but missing"
        elif name not in expected:
            problems[name] = "present but not listed"
        else:
            wanted = normalized_digest(str(expected[name]))
            algorithm, _, _ = wanted.rpartition(":")
            if algorithm not in ("", DIGEST_ALGORITHM):
                problems[name] = f"checksum algorithm '{algorithm}' is not supported (use {DIGEST_ALGORITHM})"
            elif wanted != normalized_digest(actual[name]):
                problems[name] = "sha256 differs"
    return problems


def read_metadata(version_dir: Path) -> ModelMetadata:
    path = version_dir / METADATA_FILENAME
    if not path.is_file():
        raise MetadataError(f"version {version_dir.name} has no {METADATA_FILENAME}")
    return ModelMetadata.from_json(path.read_text(encoding="utf-8"))


def write_metadata(version_dir: Path, metadata: ModelMetadata) -> Path:
    path = version_dir / METADATA_FILENAME
    path.write_text(metadata.to_json(), encoding="utf-8")
    return path
