"""How tensors cross between the server and a Python model's process: in shared memory, described by
small messages (framed as :mod:`conch_frames` frames them).

Why this shape: a message says *which* tensors (name, datatype, shape, where they lie); the bytes
themselves lie in POSIX shared memory segments (files in ``/dev/shm``) that both processes map, so a
tensor crosses the process boundary as one ``memcpy`` and is never pickled.

Each side writes into segments it owns (:class:`SegmentPool`) and the other side reads them
(:class:`SegmentReader`). A message that carries tensors names its segment; the reader copies what it
keeps and sends the segment back (``release``), and the owner reuses it. A model's inputs are the
exception: it reads them in place, and a segment it still views after ``execute`` is handed over
(``kept``): the owner unlinks it and never writes it again, and the memory goes when the model drops
the last view. A segment is sized as
Triton's ``shm-default-byte-size`` and grows by ``shm-growth-byte-size`` steps for bigger messages.
Segment names start with a prefix the server chooses per instance, so when a model process dies the
server removes everything it left behind by that prefix.

This module runs in the server *and* in the model's process, which may be another Python environment
(``EXECUTION_ENV_PATH``): it imports only the standard library and numpy.
"""

from __future__ import annotations

import contextlib
import math
import mmap
import os
import struct
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

SHM_DIR = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(os.environ.get("TMPDIR", "/tmp"))
DEFAULT_SEGMENT_BYTES = 1 << 20
GROWTH_BYTES = 1 << 20
#: Free segments a pool keeps for reuse; more than this are removed.
KEPT_FREE = 4
#: A BYTES element's length, before its bytes (Triton's layout).
_LENGTH = struct.Struct("<I")
_ALIGN = 64

NUMPY_OF = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
    "BYTES": np.object_,
}
_DATATYPE_OF: dict[np.dtype, str] = {np.dtype(v): k for k, v in NUMPY_OF.items() if k != "BYTES"}


def datatype_of(array: np.ndarray) -> str:
    """The V2 datatype of a numpy array; strings and bytes are BYTES."""
    if array.dtype.kind in ("O", "S", "U"):
        return "BYTES"
    try:
        return _DATATYPE_OF[array.dtype.newbyteorder("=")]
    except KeyError:
        raise TypeError(f"numpy dtype {array.dtype} has no V2 datatype") from None


class TensorRef(NamedTuple):
    """Where one tensor lies: ``nbytes`` bytes at ``offset`` of segment ``segment``.

    It travels as a plain tuple: this module is ``conch.backends.python.stub.conch_ipc`` in the
    server and ``conch_ipc`` in the model's process, so a class would not unpickle on the other side.
    Readers turn it back with :func:`as_ref`.
    """

    name: str
    datatype: str
    shape: tuple[int, ...]
    segment: str
    offset: int
    nbytes: int

    def __reduce__(self) -> tuple[Any, ...]:
        return (tuple, (tuple(self),))


def as_ref(value: Any) -> TensorRef:
    """A reference received as a tuple, as a :class:`TensorRef` again."""
    return value if isinstance(value, TensorRef) else TensorRef(*value)


# -- segments ---------------------------------------------------------------------------------------


class Segment:
    """One shared memory segment, mapped: a file in :data:`SHM_DIR`."""

    def __init__(self, name: str, size: int, create: bool) -> None:
        self.name = name
        self.size = size
        #: Bytes the last write filled, from the start (what a handed-over segment still needs).
        self.used = 0
        path = SHM_DIR / name
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = os.open(path, flags, 0o600)
        try:
            if create:
                os.ftruncate(fd, size)
            else:
                self.size = os.fstat(fd).st_size
            self.map = mmap.mmap(fd, self.size)
        finally:
            os.close(fd)

    def unlink(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            (SHM_DIR / self.name).unlink()


def segment_size(needed: int, default: int, growth: int) -> int:
    """Triton's sizing: the default size, grown by whole growth steps until ``needed`` fits."""
    if needed <= default:
        return default
    steps = -(-(needed - default) // max(growth, 1))
    return default + steps * max(growth, 1)


class SegmentPool:
    """The segments one side writes into. ``write`` takes a free segment big enough (or makes one),
    fills it with tensors and returns their references; ``release`` gives a segment back once the
    reader has what it needs."""

    def __init__(self, prefix: str, default: int = DEFAULT_SEGMENT_BYTES, growth: int = GROWTH_BYTES) -> None:
        self.prefix = prefix
        self.default = default
        self.growth = growth
        self._free: list[Segment] = []
        self._used: dict[str, Segment] = {}
        self._count = 0
        self._lock = threading.Lock()
        #: Free segments kept for reuse (:data:`KEPT_FREE`); a side with many messages in flight
        #: keeps about one per message, so that none is made and removed per message.
        self.kept_free = KEPT_FREE
        #: A freed segment larger than this is removed at once instead of kept (None: any size is
        #: kept), so a burst of large tensors does not leave large segments behind in /dev/shm.
        self.largest_kept: int | None = None
        #: Told the name of each segment removed for good, so the reader unmaps it too: each mapping
        #: holds a file descriptor, and segments come and go under load.
        self.on_drop: Callable[[str], None] | None = None

    def write(self, tensors: list[tuple[str, np.ndarray]]) -> tuple[str | None, list[TensorRef]]:
        """Copy ``tensors`` into one segment; (segment name, references). No tensors: (None, [])."""
        if not tensors:
            return None, []
        encoded = [(name, array, _as_bytes_payload(array)) for name, array in tensors]
        sizes = [len(raw) if raw is not None else array.nbytes for _, array, raw in encoded]
        needed = sum(_aligned(size) for size in sizes) or 1
        segment = self._take(needed)
        refs = []
        offset = 0
        for (name, array, raw), size in zip(encoded, sizes, strict=True):
            if raw is not None:
                segment.map[offset : offset + size] = raw
                datatype = "BYTES"
            else:
                datatype = datatype_of(array)
                target = np.frombuffer(segment.map, dtype=array.dtype, count=array.size, offset=offset)
                target[...] = array.reshape(-1)
            refs.append(
                TensorRef(name, datatype, tuple(int(d) for d in array.shape), segment.name, offset, size)
            )
            offset += _aligned(size)
        segment.used = offset
        return segment.name, refs

    def release(self, name: str) -> None:
        with self._lock:
            segment = self._used.pop(name, None)
            if segment is None:
                return
            if self.largest_kept is not None and segment.size > self.largest_kept:
                dropped = segment
            else:
                self._free.append(segment)
                if len(self._free) <= self.kept_free:
                    return
                self._free.sort(key=lambda s: s.size)
                dropped = self._free.pop(0)
            dropped.unlink()
            dropped.map.close()
        if self.on_drop is not None:
            self.on_drop(dropped.name)

    def hand_over(self, name: str) -> None:
        """Give segment ``name`` up for good: the reader keeps views of it (a model that holds its
        inputs). The file is unlinked, so the memory lives only while the reader maps it, and its
        pages past the last write are freed, so a kept segment holds its tensors, not its size."""
        with self._lock:
            segment = self._used.pop(name, None)
        if segment is None:
            return
        tail = -(-segment.used // mmap.PAGESIZE) * mmap.PAGESIZE
        with contextlib.suppress(AttributeError, OSError, ValueError):
            if tail < segment.size:
                segment.map.madvise(mmap.MADV_REMOVE, tail, segment.size - tail)
        segment.unlink()
        with contextlib.suppress(BufferError):
            segment.map.close()

    def close(self) -> None:
        with self._lock:
            for segment in [*self._free, *self._used.values()]:
                segment.unlink()
            self._free.clear()
            self._used.clear()

    def _take(self, needed: int) -> Segment:
        with self._lock:
            for index, segment in enumerate(self._free):
                if segment.size >= needed:
                    self._free.pop(index)
                    self._used[segment.name] = segment
                    return segment
            size = segment_size(needed, self.default, self.growth)
            while True:
                self._count += 1
                name = f"{self.prefix}-{self._count}"
                try:
                    segment = Segment(name, size, create=True)
                except FileExistsError:
                    # Left by a killed process that had this pid: not ours to remove, so skip it.
                    continue
                self._used[name] = segment
                return segment


class SegmentReader:
    """The other side's segments, mapped on first use and kept while they exist."""

    def __init__(self) -> None:
        self._maps: dict[str, Segment] = {}
        self._lock = threading.Lock()

    def view(self, ref: TensorRef) -> np.ndarray:
        """The tensor as a numpy array over the segment (no copy; BYTES are decoded into objects)."""
        ref = as_ref(ref)
        return array_in(self._segment(ref.segment).map, ref)

    def mapping(self, name: str) -> mmap.mmap:
        """Segment ``name``'s mapping. Every array :meth:`view` makes over it holds a reference to it,
        so its reference count tells whether any view (or a view of a view) is still alive."""
        return self._segment(name).map

    def copy(self, ref: TensorRef) -> np.ndarray:
        """The tensor in memory of its own, safe to keep after the segment is released."""
        array = self.view(ref)
        return array if array.dtype == object else array.copy()

    def copy_all(self, refs: list[TensorRef]) -> list[np.ndarray]:
        """Every tensor of ``refs`` (all in one segment, as one message writes them) in memory of
        their own, with one copy of the segment's used part instead of one per tensor."""
        if not refs:
            return []
        end = max(ref.offset + ref.nbytes for ref in refs)
        held = bytearray(self._segment(refs[0].segment).map[:end])
        return [array_in(held, ref) for ref in refs]

    def forget(self, name: str) -> None:
        """Drop the mapping of segment ``name``, which its owner removed (views of it stay valid: the
        mapping closes when the last one goes)."""
        with self._lock:
            self._maps.pop(name, None)

    def _segment(self, name: str) -> Segment:
        with self._lock:
            segment = self._maps.get(name)
            if segment is None:
                if "/" in name or name.startswith("."):
                    raise ValueError("bad segment name")
                segment = Segment(name, 0, create=False)
                self._maps[name] = segment
            return segment


def array_in(buffer: Any, ref: TensorRef) -> np.ndarray:
    """The tensor ``ref`` describes, over ``buffer`` (a segment's map, or a copy of it)."""
    if ref.datatype == "BYTES":
        return deserialize_bytes(bytes(buffer[ref.offset : ref.offset + ref.nbytes]), ref.shape)
    dtype = np.dtype(NUMPY_OF[ref.datatype])
    count = math.prod(ref.shape)
    return np.frombuffer(buffer, dtype=dtype, count=count, offset=ref.offset).reshape(ref.shape)


def remove_segments(prefix: str) -> None:
    """Remove every segment whose name starts with ``prefix`` (what a dead process left behind)."""
    for path in SHM_DIR.glob(f"{prefix}-*"):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


# -- BYTES ------------------------------------------------------------------------------------------


def serialize_bytes(array: np.ndarray) -> bytes:
    """Triton's BYTES layout: each element as a 4-byte little-endian length and its bytes, row-major."""
    parts = []
    for item in array.reshape(-1).tolist():
        if isinstance(item, str):
            item = item.encode("utf-8")
        elif not isinstance(item, (bytes, bytearray)):
            item = str(item).encode("utf-8")
        parts.append(_LENGTH.pack(len(item)))
        parts.append(bytes(item))
    return b"".join(parts)


def deserialize_bytes(raw: bytes, shape: tuple[int, ...]) -> np.ndarray:
    """The inverse of :func:`serialize_bytes`: an object array of ``bytes`` in ``shape``."""
    items = []
    offset = 0
    while offset < len(raw):
        (length,) = _LENGTH.unpack_from(raw, offset)
        offset += _LENGTH.size
        items.append(raw[offset : offset + length])
        offset += length
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out.reshape(shape)


def _as_bytes_payload(array: np.ndarray) -> bytes | None:
    return serialize_bytes(array) if array.dtype.kind in ("O", "S", "U") else None


def _aligned(size: int) -> int:
    return -(-size // _ALIGN) * _ALIGN
