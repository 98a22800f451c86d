"""The package file: a gzip-compressed tar written reproducibly and read back trusting none of it.

Layout (one top folder, so ``tar xzf`` never spills and the result is a servable one-version model)::

    <name>/config.pbtxt
    <name>/warmup/...            (when the model has warm-up files)
    <name>/1/metadata.json
    <name>/1/model.onnx ...      (every file of the packaged version)
    <name>/signature.json        (when signed: see :mod:`conch.packaging.signing`)

The version folder is always ``1`` inside a package: a package is a release, not a slot in someone's
repository; ``conch install`` gives it the next free number there.

Writing: the same files give the same bytes (sorted members, mtime 0, uid/gid 0, no owner names, modes
0644/0755, PAX format, a gzip header with neither mtime nor file name), so a package can be checked
against a rebuild. Reading: only regular files and folders with relative paths inside the layout pass;
anything else (links, devices, fifos, absolute paths, ``..``, a member twice) is refused before use.

Decompression bombs: a few kilobytes of gzip can unpack to terabytes, or to millions of empty members.
:class:`UnpackLimits` caps both, checked on each member's header before its content is read, so a bomb
is refused after reading its headers and writing nothing. The tar stream itself is read through
:class:`_BoundedStream`, which stops at the cap plus room for headers, because ``tarfile`` reads a
PAX or GNU long-name header whole into memory, whatever size it claims.
"""

from __future__ import annotations

import gzip
import io
import os
import re
import tarfile
import tempfile
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

from conch.packaging.metadata import CONFIG_FILENAME, WARMUP_FOLDER

PACKAGE_VERSION_FOLDER = "1"
SIGNATURE_FILENAME = "signature.json"
# A model name becomes a folder in someone else's repository: no separators, no leading '.' (hidden,
# and skipped by the server) or '-' (read as an option by shells' tools).
_MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")

_CHUNK = 1 << 20
_FILE_MODE = 0o644
_FOLDER_MODE = 0o755
# What a damaged .tar.gz raises while it is read; OSError in general is left alone, because it also
# means "could not write" on the install side.
_READ_ERRORS = (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile)
_MEMBER_KINDS = {
    tarfile.SYMTYPE: "a symbolic link",
    tarfile.LNKTYPE: "a hard link",
    tarfile.CHRTYPE: "a character device",
    tarfile.BLKTYPE: "a block device",
    tarfile.FIFOTYPE: "a fifo",
}


class PackageError(Exception):
    """A package cannot be made or installed; the message says what is wrong and what to do."""


# A model of tens of gigabytes (ONNX external data) fits; a bomb meant to fill the disk does not.
DEFAULT_MAX_UNPACKED_BYTES = 16 << 30
# A model version is a handful of files; a package of 10,000 members is already a strange one.
DEFAULT_MAX_MEMBERS = 10_000
# Room per member for its tar header, PAX header and padding, beyond the files' own bytes.
_HEADER_ROOM = 8 << 10


@dataclass(frozen=True)
class UnpackLimits:
    """What a package may unpack to: its files' bytes in all, and its number of members (folders too)."""

    max_unpacked_bytes: int = DEFAULT_MAX_UNPACKED_BYTES
    max_members: int = DEFAULT_MAX_MEMBERS

    def stream_bytes(self) -> int:
        """The most the decompressed tar stream may hold: the files, headers and the end-of-archive."""
        return self.max_unpacked_bytes + (self.max_members + 2) * _HEADER_ROOM


class _BoundedStream(io.RawIOBase):
    """The decompressed stream, refused once ``limit`` bytes are passed; ``tarfile`` reads and seeks it."""

    def __init__(self, inner: gzip.GzipFile, limit: int) -> None:
        super().__init__()
        self._inner, self._limit = inner, limit

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        room = self._limit - self._inner.tell() + 1  # one byte past the limit proves it was passed
        wanted = room if size is None or size < 0 else min(size, room)
        data = self._inner.read(wanted)
        if self._inner.tell() > self._limit:
            raise _StreamTooLarge(self._limit)
        return data

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        position = self._inner.seek(offset, whence)
        if position > self._limit:
            raise _StreamTooLarge(self._limit)
        return position

    def tell(self) -> int:
        return self._inner.tell()


class _StreamTooLarge(Exception):
    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self.limit = limit


def check_model_name(name: str) -> None:
    """Refuse a model name that is not safe as a folder name in a repository."""
    if not _MODEL_NAME.fullmatch(name):
        raise PackageError(
            f"model name '{name}' is not a safe folder name: use letters, digits, '_', '.' and '-' "
            "(at most 128), starting with a letter or digit"
        )


@dataclass(frozen=True)
class PackageMember:
    """One member that passed the safety rules: its place in the layout and, for a file, its content."""

    top: str
    place: PurePosixPath  # relative to the top folder; empty for the top folder itself
    content: IO[bytes] | None  # None for a folder

    def chunks(self) -> Iterator[bytes]:
        stream = self.content
        if stream is None:
            raise ValueError(f"'{self.place}' is a folder: it has no content")
        return iter(lambda: stream.read(_CHUNK), b"")


def write_package(output: Path, members: dict[str, Path | bytes | None]) -> None:
    """Write ``members`` (archive name -> file, bytes, or None for a folder) reproducibly to ``output``.

    The tar is written beside ``output`` and renamed over it, so a failure never leaves half a package.
    """
    handle, partial_name = tempfile.mkstemp(prefix=f".{output.name}.", dir=output.parent)
    partial = Path(partial_name)
    try:
        with (
            os.fdopen(handle, "wb") as raw,
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=9, mtime=0) as compressed,
            tarfile.open(fileobj=compressed, mode="w", format=tarfile.PAX_FORMAT) as archive,
        ):
            for name in sorted(members):
                _add_member(archive, name, members[name])
        partial.chmod(_FILE_MODE)  # mkstemp makes it 0600: a package is meant to be shared
        os.replace(partial, output)
    finally:
        partial.unlink(missing_ok=True)


def _add_member(archive: tarfile.TarFile, name: str, source: Path | bytes | None) -> None:
    info = tarfile.TarInfo(name)
    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
    if source is None:
        info.type, info.mode = tarfile.DIRTYPE, _FOLDER_MODE
        archive.addfile(info)
    elif isinstance(source, bytes):
        info.mode, info.size = _FILE_MODE, len(source)
        archive.addfile(info, io.BytesIO(source))
    else:
        info.mode, info.size = _FILE_MODE, source.stat().st_size
        with source.open("rb") as stream:
            archive.addfile(info, stream)


@contextmanager
def read_package(path: Path, limits: UnpackLimits | None = None) -> Iterator[Iterator[PackageMember]]:
    """The members of the package at ``path``, each checked as it is reached; read them in order.

    Any damage to the gzip or tar stream, met on opening or later while a member is read inside the
    ``with`` block, becomes a :class:`PackageError`, and so does passing one of ``limits``.
    """
    limits = limits or UnpackLimits()
    try:
        # Opened outside the `with` so that errors on opening (a folder, no permission) are told apart
        # from damage met later, when OSError may come from the caller's own writing.
        compressed = gzip.GzipFile(path, "rb")
    except OSError as exc:
        raise _unreadable(path, exc) from None
    try:
        bounded = _BoundedStream(compressed, limits.stream_bytes())
        archive = tarfile.open(fileobj=bounded, mode="r:")  # type: ignore[call-overload]  # noqa: SIM115
    except _StreamTooLarge as exc:
        compressed.close()
        raise _too_large(path, exc.limit) from None
    except (*_READ_ERRORS, OSError) as exc:
        compressed.close()
        raise _unreadable(path, exc) from None
    with compressed, archive:
        try:
            yield _checked_members(archive, limits)
        except _READ_ERRORS as exc:
            raise _unreadable(path, exc) from None
        except _StreamTooLarge as exc:
            raise _too_large(path, exc.limit) from None


def _too_large(path: Path, limit: int) -> PackageError:
    return PackageError(
        f"{path.name} unpacks to more than {limit} bytes of tar stream (a decompression bomb?): "
        "raise --max-unpacked-bytes if the package is trusted and really that large"
    )


def _unreadable(path: Path, exc: Exception) -> PackageError:
    return PackageError(f"{path.name} is not a readable .tar.gz package ({exc})")


def _checked_members(archive: tarfile.TarFile, limits: UnpackLimits) -> Iterator[PackageMember]:
    seen: set[PurePosixPath] = set()
    top = ""
    unpacked = 0
    for count, member in enumerate(archive, start=1):
        if count > limits.max_members:
            raise PackageError(
                f"the package has more than {limits.max_members} members (a decompression bomb?): "
                "raise --max-members if the package is trusted and really holds that many"
            )
        unpacked += member.size if member.isfile() else 0
        if unpacked > limits.max_unpacked_bytes:
            raise PackageError(
                f"the package unpacks to more than {limits.max_unpacked_bytes} bytes, reached at member "
                f"'{member.name}' (a decompression bomb?): raise --max-unpacked-bytes if the package is "
                "trusted and really that large"
            )
        path = _safe_path(member)
        if path in seen:
            raise PackageError(f"member '{member.name}' appears twice in the package")
        seen.add(path)
        top = top or path.parts[0]
        place = _layout_place(member.name, path, top, member.isdir())
        content = archive.extractfile(member) if member.isfile() else None
        yield PackageMember(top, place, content)


def _safe_path(member: tarfile.TarInfo) -> PurePosixPath:
    kind = _MEMBER_KINDS.get(member.type)
    if kind is None and member.type not in (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.DIRTYPE):
        kind = f"a special member (tar type {member.type!r})"
    if kind is not None:
        raise PackageError(f"member '{member.name}' is {kind}: a package holds only files and folders")
    if member.name.startswith("/"):
        raise PackageError(f"member '{member.name}' has an absolute path: a package holds relative paths")
    path = PurePosixPath(member.name)
    if ".." in path.parts:
        raise PackageError(f"member '{member.name}' leads out of its folder with '..'")
    if not path.parts:
        raise PackageError(f"member '{member.name}' has an empty path")
    return path


def _layout_place(name: str, path: PurePosixPath, top: str, is_folder: bool) -> PurePosixPath:
    """Where the member sits under the top folder, if the layout has room for it there."""
    place = PurePosixPath(*path.parts[1:])
    head = place.parts[0] if place.parts else ""
    if path.parts[0] == top and (
        (head == "" and is_folder)
        or (place in (PurePosixPath(CONFIG_FILENAME), PurePosixPath(SIGNATURE_FILENAME)) and not is_folder)
        or (head in (WARMUP_FOLDER, PACKAGE_VERSION_FOLDER) and (is_folder or len(place.parts) > 1))
    ):
        return place
    raise PackageError(
        f"member '{name}' is outside the package layout ({top}/{CONFIG_FILENAME}, "
        f"{top}/{WARMUP_FOLDER}/..., {top}/{PACKAGE_VERSION_FOLDER}/...)"
    )


def package_members(files: Iterable[tuple[str, Path | bytes]], top: str) -> dict[str, Path | bytes | None]:
    """Archive names for files placed relative to the top folder, with every folder above them."""
    members: dict[str, Path | bytes | None] = {}
    for place, source in files:
        path = PurePosixPath(top, place)
        members[path.as_posix()] = source
        for folder in path.parents[:-1]:
            members[folder.as_posix()] = None
    return members
