"""The registered system shared-memory regions of this process, by name, and the checks on their use.

Every use names a region, an offset into it and a size; :func:`check_bounds` refuses any that leaves
the region, on every request, so a request never reads or writes outside what the client registered.

Unregistering a region that requests are using is deferred, as in Triton: the name is removed at once
(new requests cannot use it, and it may be registered again), and the mapping is closed when the last
request holding it finishes, so an answer is never written into memory that was unmapped under it.

Regions live in one process: with ``--workers`` above 1 a region registered through one connection
would be unknown to the other workers, so registration is refused there (:meth:`refuse`).
"""

from __future__ import annotations

import mmap
import weakref
from dataclasses import dataclass
from typing import Any

from conch.core.errors import InvalidArgumentError, NotFoundError, UnavailableError
from conch.shared_memory.posix import map_object

#: The answer to every CUDA shared-memory call: only system shared memory is implemented.
CUDA_REFUSAL = (
    "CUDA shared memory is not supported by this server: it shares no GPU memory. Use system shared "
    "memory (/v2/systemsharedmemory, gRPC SystemSharedMemory*; tritonclient.utils.shared_memory), or "
    "send the tensors in the request"
)


def cuda_status(region: str) -> list[dict[str, Any]]:
    """CUDA shared memory's status, as Triton answers where none is registered: no region at all, and
    a named region is unknown (a 404). Clients that list or clean up regions at start then go on;
    registering one is still refused with :data:`CUDA_REFUSAL`."""
    if region:
        raise NotFoundError(
            f"Unable to find cuda shared memory region: '{region}'; conch registers no CUDA shared "
            "memory (use system shared memory)"
        )
    return []


def check_bounds(name: str, region_size: int, offset: int, byte_size: int) -> None:
    """Triton's checks of a tensor's place in a region of ``region_size`` bytes (a 400 naming the fix)."""
    if offset < 0 or offset >= region_size:
        raise InvalidArgumentError(
            f"Invalid offset for shared memory region: '{name}'; the offset {offset} must be at least 0 "
            f"and below the region's {region_size} bytes"
        )
    if byte_size < 0 or offset + byte_size > region_size:
        raise InvalidArgumentError(
            f"Invalid offset + byte size for shared memory region: '{name}'; offset {offset} + byte size "
            f"{byte_size} goes past the region's {region_size} bytes"
        )


@dataclass
class Region:
    """One registered region: ``byte_size`` bytes at ``offset`` in the POSIX object ``key``."""

    name: str
    key: str
    offset: int
    byte_size: int
    mapping: mmap.mmap
    users: int = 0
    unregistered: bool = False

    def check(self, offset: int, byte_size: int) -> None:
        """Refuse a place ``[offset, offset + byte_size)`` that leaves the region."""
        check_bounds(self.name, self.byte_size, offset, byte_size)

    def read(self, offset: int, byte_size: int) -> bytes:
        """A copy of the region's bytes ``[offset, offset + byte_size)``."""
        self.check(offset, byte_size)
        start = self.offset + offset
        return self.mapping[start : start + byte_size]

    def write(self, offset: int, data: bytes | memoryview) -> None:
        """Write ``data`` at ``offset`` in the region (no view of the mapping outlives the call, so it
        can always be closed)."""
        self.check(offset, len(data))
        start = self.offset + offset
        self.mapping[start : start + len(data)] = data

    def status(self) -> dict[str, Any]:
        return {"name": self.name, "key": self.key, "offset": self.offset, "byte_size": self.byte_size}


class SharedMemoryRegistry:
    """Regions by name: register, status, unregister, and holding one for the length of a request."""

    def __init__(self) -> None:
        self.regions: dict[str, Region] = {}
        #: Why registration is refused in this process ("": it is not).
        self.refused = ""

    def refuse(self, reason: str) -> None:
        """Refuse every registration from now on, with ``reason`` as the client's explanation."""
        self.refused = reason

    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        """Map ``byte_size`` bytes at ``offset`` of the object ``key`` as region ``name``."""
        if self.refused:
            raise UnavailableError(self.refused)
        if not name:
            raise InvalidArgumentError("'region name' is necessary to register system shared memory region")
        if name in self.regions:
            raise InvalidArgumentError(
                f"shared memory region '{name}' already in manager; unregister it first, or choose "
                "another name"
            )
        if offset < 0 or byte_size < 0:
            raise InvalidArgumentError(
                f"failed to register shared memory region '{name}': invalid args; offset and byte_size "
                "must be at least 0"
            )
        mapping = map_object(key)
        size = len(mapping)
        if offset + byte_size > size:
            mapping.close()
            raise InvalidArgumentError(
                f"failed to register shared memory region '{name}': invalid args; offset {offset} + "
                f"byte_size {byte_size} goes past the {size} bytes of '{key}'"
            )
        self.regions[name] = Region(name, key, offset, byte_size, mapping)

    def status(self, name: str = "") -> list[dict[str, Any]]:
        """Every region's status, or the one named (a 404 when it is not registered)."""
        if not name:
            return [region.status() for _, region in sorted(self.regions.items())]
        return [self._named(name, "Unable to find system shared memory region").status()]

    def unregister(self, name: str = "") -> None:
        """Unregister ``name`` (every region when empty); an unknown name is nothing to do, as in Triton."""
        for each in [name] if name else list(self.regions):
            region = self.regions.pop(each, None)
            if region is not None:
                region.unregistered = True
                self._close_if_unused(region)

    def hold(self, name: str) -> Region:
        """The region ``name``, kept mapped until :meth:`release`, even if it is unregistered meanwhile."""
        region = self._named(name, "Unable to find shared memory region")
        region.users += 1
        return region

    def release(self, region: Region) -> None:
        region.users -= 1
        self._close_if_unused(region)

    def _named(self, name: str, words: str) -> Region:
        region = self.regions.get(name)
        if region is None:
            raise NotFoundError(f"{words}: '{name}'; register it first (see the status for those registered)")
        return region

    @staticmethod
    def _close_if_unused(region: Region) -> None:
        if region.unregistered and region.users == 0:
            region.mapping.close()


_REGISTRIES: weakref.WeakKeyDictionary[object, SharedMemoryRegistry] = weakref.WeakKeyDictionary()


def registry_of(server: object) -> SharedMemoryRegistry:
    """The one registry of ``server`` (an InferenceServer), shared by its HTTP and gRPC frontends."""
    registry = _REGISTRIES.get(server)
    if registry is None:
        registry = _REGISTRIES[server] = SharedMemoryRegistry()
    return registry
