"""The shared store of verdicts: one immutable JSON object per decision, in a folder or under an S3 prefix.

Every replica and every CLI command reads the same store, named by one setting (``--release-store``,
``CONCH_RELEASE_STORE``): a folder path, or ``s3://[host:port/]bucket/prefix``. A record is written once
under a key of its own (``<model>/<microseconds>-<kind>-<random>.json``) and never rewritten, so two
replicas that decide at the same moment both keep their record: there is no read-modify-write to lose.
A reader lists the keys and fetches only those it has not seen, so a poll costs one listing.

The store is blocking I/O; the server calls it on a worker thread.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
from pathlib import Path
from typing import Any, Protocol

from conch.release.store import write_whole
from conch.release.verdicts import Verdict
from conch.repository.object_store import (
    ObjectStoreError,
    S3Location,
    connect,
    is_s3_url,
    list_objects,
    parse_s3_url,
    translated_errors,
)

log = logging.getLogger(__name__)

SUFFIX = ".json"
#: The store's folder inside a repository (a bucket's prefix) when ``--release-store`` names none.
VERDICTS_FOLDER = ".conch-verdicts"


class VerdictStoreError(Exception):
    """The store cannot be read or written; the message names it and the cause, never a credential."""


class _Objects(Protocol):
    def names(self) -> list[str]: ...
    def read(self, key: str) -> bytes: ...
    def write(self, key: str, body: bytes) -> None: ...


class _Folder:
    """Records as files under a folder (a volume every replica mounts, or one machine's disk)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def names(self) -> list[str]:
        """Every record's key; an absent folder is an empty store, one that cannot be listed an error."""
        if not self.root.exists():
            return []
        with os.scandir(self.root) as models:
            folders = [entry.name for entry in models if entry.is_dir() and not entry.name.startswith(".")]
        found = []
        for model in folders:
            with os.scandir(self.root / model) as records:
                found += [f"{model}/{e.name}" for e in records if e.name.endswith(SUFFIX) and e.is_file()]
        return sorted(found)

    def read(self, key: str) -> bytes:
        return (self.root / key).read_bytes()

    def write(self, key: str, body: bytes) -> None:
        write_whole(self.root / key, body)


class _Bucket:
    """Records as objects under an S3 prefix (or MinIO's, with an endpoint in the URL)."""

    def __init__(self, location: S3Location) -> None:
        self.location = location
        self._client: Any = None

    def _connected(self) -> Any:
        if self._client is None:
            self._client = connect(self.location)
        return self._client

    def names(self) -> list[str]:
        listed = list_objects(self._connected(), self.location)
        return sorted(key for key in listed if key.endswith(SUFFIX) and key.count("/") == 1)

    def read(self, key: str) -> bytes:
        with translated_errors(self.location, key):
            answer = self._connected().get_object(Bucket=self.location.bucket, Key=self._key(key))
            return bytes(answer["Body"].read())

    def write(self, key: str, body: bytes) -> None:
        with translated_errors(self.location, key):
            self._connected().put_object(Bucket=self.location.bucket, Key=self._key(key), Body=body)

    def _key(self, key: str) -> str:
        return self.location.key_prefix + key


class VerdictStore:
    """Appends verdicts and reads them all back, fetching each record once."""

    def __init__(self, location: str) -> None:
        self.location = location
        self._objects: _Objects = (
            _Bucket(parse_s3_url(location)) if is_s3_url(location) else _Folder(Path(location))
        )
        self._seen: dict[str, Verdict | None] = {}

    def __str__(self) -> str:
        return self.location

    def append(self, verdict: Verdict) -> None:
        """Write one record under a key of its own; raises :class:`VerdictStoreError` when it cannot."""
        _check_model(verdict.model)
        key = f"{verdict.model}/{round(verdict.at * 1e6):020d}-{verdict.kind}-{secrets.token_hex(4)}{SUFFIX}"
        body = json.dumps(verdict.to_json(), sort_keys=True).encode()
        try:
            self._objects.write(key, body)
        except (ObjectStoreError, OSError) as exc:
            raise VerdictStoreError(f"cannot write to the release store {self}: {_cause(exc)}") from None
        self._seen[key] = verdict

    def read(self) -> list[Verdict]:
        """Every record, oldest first; raises :class:`VerdictStoreError` when the store cannot be read.

        A record that is not a verdict (a stray file, a half-written object) is logged once and skipped.
        """
        try:
            for key in self._objects.names():
                if key not in self._seen:
                    self._seen[key] = self._parsed(key, self._objects.read(key))
        except (ObjectStoreError, OSError) as exc:
            raise VerdictStoreError(f"cannot read the release store {self}: {_cause(exc)}") from None
        return sorted((v for v in self._seen.values() if v is not None), key=lambda v: v.at)

    def _parsed(self, key: str, body: bytes) -> Verdict | None:
        try:
            return Verdict.from_json(json.loads(body))
        except (ValueError, KeyError, TypeError):
            log.warning("release store %s: %s is not a verdict record; ignored", self, key)
            return None


def _check_model(model: str) -> None:
    if not model or model.startswith(".") or any(bad in model for bad in ("/", "\\", "\0")):
        raise VerdictStoreError(f"model name {model!r} cannot name a record in the release store")


def _cause(exc: ObjectStoreError | OSError) -> str:
    if isinstance(exc, OSError):
        return exc.strerror or type(exc).__name__
    return str(exc)
