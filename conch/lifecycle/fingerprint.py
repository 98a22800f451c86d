"""What a model folder holds, summarised, so a poll can tell what changed and whether it has settled.

A fingerprint is the sorted list of every file's relative path, size and modification time. It is read,
never hashed from content, so a scan of a large repository stays cheap. Two equal fingerprints taken a
moment apart mean nothing was being written in between: poll mode loads a changed folder only then
(see :mod:`conch.lifecycle.model_control`).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc


def version_fingerprint(version_dir: Path) -> str:
    """The files of one version folder."""
    return _digest(_entries(version_dir))


def content_fingerprint(version_dir: Path) -> str:
    """The bytes of one version folder: every file's relative path and the SHA-256 of its content.

    Unlike :func:`version_fingerprint` it does not change when a file is copied or downloaded again, so
    another pod, or the same pod after a fresh sync from S3, finds the same value. It reads every byte
    (about 1 s for 1 GB), so it is taken only for a version with a rejection on record.
    """
    digest = hashlib.sha256()
    for path in sorted(version_dir.rglob("*")):
        if path.is_file() and path.name != "metadata.json":
            with path.open("rb") as file:
                inner = hashlib.file_digest(file, "sha256").hexdigest()
            digest.update(f"{path.relative_to(version_dir).as_posix()}\0{inner}\n".encode())
    return digest.hexdigest()[:32]


def model_fingerprint(model_dir: Path) -> str:
    """Everything in a model folder: its config, warm-up files and every version folder."""
    return _digest(_entries(model_dir))


def config_text(config: mc.ModelConfig) -> str:
    """A config as text, to compare an override with what a version was loaded with."""
    return "override:" + text_format.MessageToString(config)


def _entries(root: Path) -> list[str]:
    if not root.is_dir():
        return []
    entries = []
    for path in sorted(root.rglob("*")):
        try:
            stat = path.stat()
        except OSError:  # removed while we looked: the next scan sees the result
            continue
        if path.is_file():
            entries.append(f"{path.relative_to(root).as_posix()}\0{stat.st_size}\0{stat.st_mtime_ns}")
    return entries


def _digest(entries: list[str]) -> str:
    return hashlib.sha256("\n".join(entries).encode()).hexdigest()
