"""The local mirror of an ``s3://`` model repository: the folder-based repository reads it as it reads
any folder, so everything past this module is unaware of object storage.

A cache folder (one per endpoint, bucket and prefix, see :func:`cache_folder`) holds::

    repository/     the mirror, which is what conch serves
    manifest.json   the ETag and size of every mirrored object, by its path in the mirror
    source.json     the s3:// URL mirrored here, so a served folder leads back to its store
    staging/        downloads in progress, emptied at the start of every sync
    lock            held during a sync, so two servers sharing a cache take turns

The rules:

- **A reader never sees a half-written version.** A version folder (``<model>/<digits>/...``) is built
  whole in ``staging/``, on the same filesystem, then renamed into place. A changed version is
  renamed out and the new one renamed in: a reader sees the old one, the new one or, between the two
  renames, neither, but never a mix. A new model folder appears whole, versions and config together.
  A model's other files (``config.pbtxt``, labels) are each replaced by one rename.
- **Only what changed is downloaded.** An object whose ETag and size match the manifest, and whose
  file is still there, is kept; the unchanged files of a changed version are hard-linked, not fetched.
- **The mirror follows the bucket.** Objects removed from the bucket are removed from the cache; a
  model with no object left goes away whole.
- **A version still being uploaded is not picked up** (poll mode): S3 makes each object appear whole,
  but not a folder of them. :meth:`ObjectStoreRepository.refresh` applies a new or changed version only
  once two listings in a row agree on it, so an upload in progress is held for a poll. A pause of
  more than a poll between two files of one version cannot be told from a finished upload.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conch.repository.object_store import (
    ObjectStoreError,
    ObjectStoreLocationError,
    S3Location,
    StoredObject,
    connect,
    download,
    list_objects,
    parse_s3_url,
)
from conch.repository.sync_plan import Entry, Group, Plan, group_of, plan_sync

log = logging.getLogger(__name__)

CACHE_ENV = "CONCH_MODEL_CACHE_DIR"
DEFAULT_CACHE_BASE = "~/.cache/conch/s3"


def default_cache_base() -> Path:
    """``$CONCH_MODEL_CACHE_DIR``, else ``~/.cache/conch/s3``: the folder that holds every cache folder."""
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE_BASE).expanduser()


def cache_folder(location: S3Location, base: Path) -> Path:
    """``<base>/<bucket>/<16 hex digits>``: the digits hash the endpoint, bucket and prefix, so the same
    bucket name on two stores, or two prefixes of one bucket, never share a mirror."""
    digest = hashlib.sha256(f"{location.endpoint_url or ''}\n{location.bucket}\n{location.prefix}".encode())
    return base / location.bucket / digest.hexdigest()[:16]


@dataclass
class SyncReport:
    """What one sync did, by path in the mirror."""

    downloaded: list[str] = field(default_factory=list)
    placed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    held: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        """Whether the served folder changed, so a scan has something new to find."""
        return bool(self.placed or self.removed)


class ObjectStoreRepository:
    """An ``s3://`` repository and its cache folder; :attr:`root` is the folder conch serves.

    ``sync()`` makes the first mirror at start; poll mode calls ``refresh()`` before each scan.
    Both raise :class:`~conch.repository.object_store.ObjectStoreError`; after a failed refresh the
    mirror is still whole and can go on being served.
    """

    def __init__(self, url: str, cache_dir: Path) -> None:
        self.location = parse_s3_url(url)
        self.cache_dir = cache_dir
        self._client: Any = None
        self._objects: dict[str, StoredObject] = {}
        self._previous: dict[str, Entry] | None = None

    @classmethod
    def in_cache(cls, url: str, base: Path | None = None) -> ObjectStoreRepository:
        """The repository at ``url`` with its cache folder under ``base`` (default
        :func:`default_cache_base`)."""
        base = base.expanduser() if base is not None else default_cache_base()
        return cls(url, cache_folder(parse_s3_url(url), base))

    @property
    def root(self) -> Path:
        return self.cache_dir / "repository"

    def sync(self) -> SyncReport:
        """Mirror everything under the prefix now. A prefix with no object is refused, as a local path
        that is not a folder is: far more often a typo than an empty repository."""
        listed = self._list()
        if not listed:
            raise ObjectStoreLocationError(f"no objects under {self.location}: check the bucket and prefix")
        return self._mirror(listed, previous=None)

    def refresh(self) -> bool:
        """Bring the mirror up to date with the bucket, holding back what is still being uploaded;
        True when the served folder changed. An emptied prefix empties the mirror, as an emptied
        folder would."""
        listed = self._list()
        if self._previous is None:
            self._previous = self._read_manifest() or {}
        return self._mirror(listed, previous=self._previous).changed

    def poll_refresh(self) -> bool:
        """:meth:`refresh` for a poll loop (``ModelControl.before_scan``): a store that cannot be read
        is one warning, and the scan that follows serves the mirror as it stands. False then."""
        try:
            return self.refresh()
        except ObjectStoreError as exc:
            log.warning("model cache of %s not refreshed: %s", self.location, exc)
            return False

    def _list(self) -> dict[str, Entry]:
        if self._client is None:
            self._client = connect(self.location)
        self._objects = list_objects(self._client, self.location)
        return {path: (stored.etag, stored.size) for path, stored in self._objects.items()}

    def _mirror(self, listed: dict[str, Entry], previous: dict[str, Entry] | None) -> SyncReport:
        with self._locked():
            manifest = self._read_manifest()
            if manifest is None:
                # No manifest, or one we cannot trust: start the mirror afresh rather than guess.
                self._discard(self.root)
                manifest = {}
            mirrored = {path: e for path, e in manifest.items() if _holds(self.root / path, e[1])}
            plan = plan_sync(listed, mirrored, previous)
            report = SyncReport(held=sorted("/".join(g) or "." for g in plan.held))
            try:
                self._apply(plan, mirrored, manifest, report)
            finally:
                self._write_json("manifest.json", {path: list(e) for path, e in sorted(manifest.items())})
            self._write_json("source.json", {"url": str(self.location)})
        self._previous = listed
        if report.changed or report.held:
            log.info(
                "model cache of %s: %d downloaded, placed %s, removed %s, held back %s",
                self.location,
                len(report.downloaded),
                report.placed or "nothing",
                report.removed or "nothing",
                report.held or "nothing",
            )
        return report

    def _apply(
        self, plan: Plan, mirrored: dict[str, Entry], manifest: dict[str, Entry], report: SyncReport
    ) -> None:
        """Carry out ``plan``, keeping ``manifest`` true to the mirror after every step, so an error part
        way leaves a manifest the next sync can trust."""
        gone_models = {g[0] for g in plan.remove if g} - {g[0] for g in plan.place if g}
        gone_models -= {path.split("/")[0] for path in manifest if group_of(path) not in plan.remove}
        for model in sorted(gone_models):
            self._discard(self.root / model)
            _forget(manifest, [p for p in manifest if p.split("/")[0] == model])
            report.removed.append(model)
        by_model: dict[str, list[Group]] = {}
        for group in plan.place:
            by_model.setdefault(group[0] if group else "", []).append(group)
        for model, groups in sorted(by_model.items()):
            if model and not (self.root / model).exists():
                self._place_new_model(model, {g: plan.place[g] for g in groups}, manifest, report)
                continue
            for group in sorted(groups, key=len, reverse=True):  # versions first, the config last
                if len(group) == 2:
                    self._place_version(group, plan.place[group], mirrored, manifest, report)
                else:
                    self._place_files(group, plan.place[group], mirrored, manifest, report)
        for group in sorted(plan.remove):
            if group and group[0] in gone_models:
                continue
            paths = [p for p in manifest if group_of(p) == group]
            if len(group) == 2:
                self._discard(self.root.joinpath(*group))
                report.removed.append("/".join(group))
            else:
                for path in paths:
                    (self.root / path).unlink(missing_ok=True)
                report.removed += paths
            _forget(manifest, paths)

    def _place_new_model(
        self,
        model: str,
        groups: dict[Group, dict[str, Entry]],
        manifest: dict[str, Entry],
        report: SyncReport,
    ) -> None:
        staged = Path(tempfile.mkdtemp(dir=self.cache_dir / "staging"))
        for content in groups.values():
            for path in content:
                self._fetch(path, staged / path, report)
        self.root.mkdir(parents=True, exist_ok=True)
        (staged / model).rename(self.root / model)
        for content in groups.values():
            manifest.update(content)
        report.placed.append(model)

    def _place_version(
        self,
        group: Group,
        content: dict[str, Entry],
        mirrored: dict[str, Entry],
        manifest: dict[str, Entry],
        report: SyncReport,
    ) -> None:
        staged = Path(tempfile.mkdtemp(dir=self.cache_dir / "staging"))
        for path, entry in content.items():
            if mirrored.get(path) == entry:
                _link(self.root / path, staged / path)
            else:
                self._fetch(path, staged / path, report)
        target = self.root.joinpath(*group)
        self._discard(target)
        _forget(manifest, [p for p in manifest if group_of(p) == group])
        target.parent.mkdir(parents=True, exist_ok=True)
        staged.joinpath(*group).rename(target)
        manifest.update(content)
        report.placed.append("/".join(group))

    def _place_files(
        self,
        group: Group,
        content: dict[str, Entry],
        mirrored: dict[str, Entry],
        manifest: dict[str, Entry],
        report: SyncReport,
    ) -> None:
        staged = Path(tempfile.mkdtemp(dir=self.cache_dir / "staging"))
        for path, entry in sorted(content.items()):
            if mirrored.get(path) == entry:
                continue
            self._fetch(path, staged / path, report)
            (self.root / path).parent.mkdir(parents=True, exist_ok=True)
            os.replace(staged / path, self.root / path)
            manifest[path] = entry
            report.placed.append(path)
        for path in [p for p in manifest if group_of(p) == group and p not in content]:
            (self.root / path).unlink(missing_ok=True)
            del manifest[path]
            report.removed.append(path)

    def _fetch(self, path: str, destination: Path, report: SyncReport) -> None:
        destination.parent.mkdir(parents=True, exist_ok=True)
        download(self._client, self.location, self._objects[path], destination)
        report.downloaded.append(path)

    def _discard(self, path: Path) -> None:
        """Rename ``path`` out of the mirror first, so it disappears at once, then delete it."""
        if path.exists():
            out = Path(tempfile.mkdtemp(dir=self.cache_dir / "staging")) / "discarded"
            path.rename(out)
            shutil.rmtree(out)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        with (self.cache_dir / "lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            staging = self.cache_dir / "staging"
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir()
            try:
                yield
            finally:
                shutil.rmtree(staging, ignore_errors=True)
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _read_manifest(self) -> dict[str, Entry] | None:
        try:
            raw = json.loads((self.cache_dir / "manifest.json").read_text())
            return {str(path): (str(etag), int(size)) for path, (etag, size) in raw.items()}
        except (OSError, ValueError, TypeError, AttributeError):
            return None

    def _write_json(self, name: str, value: object) -> None:
        temporary = self.cache_dir / f".{name}.tmp"
        temporary.write_text(json.dumps(value, indent=1))
        os.replace(temporary, self.cache_dir / name)


def sync(source: str | S3Location, cache_dir: Path) -> Path:
    """Mirror ``source`` into ``cache_dir`` (see the module's rules) and return the folder to serve."""
    repository = ObjectStoreRepository(str(source), cache_dir)
    repository.sync()
    return repository.root


def mirrored_from(root: Path) -> ObjectStoreRepository | None:
    """The repository a served folder mirrors, for poll mode to :meth:`~ObjectStoreRepository.refresh`
    before each scan; None for an ordinary folder."""
    try:
        url = json.loads((root.parent / "source.json").read_text())["url"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return ObjectStoreRepository(str(url), root.parent) if root.name == "repository" else None


def _holds(path: Path, size: int) -> bool:
    try:
        return path.stat().st_size == size
    except OSError:
        return False


def _link(source: Path, destination: Path) -> None:
    """An unchanged file into a staged version: a hard link (the mirror never rewrites a file in place,
    so sharing it is safe), or a copy where the filesystem has no hard links."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, destination)
    except OSError:
        shutil.copy2(source, destination)


def _forget(manifest: dict[str, Entry], paths: list[str]) -> None:
    for path in paths:
        del manifest[path]
