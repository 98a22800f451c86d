"""POSIX shared memory as ``shm_open`` names it: a file in ``/dev/shm``, mapped whole into this process.

A key is a name, with or without one leading ``/`` (``/input_simple`` or ``input_simple``), as
``tritonclient.utils.shared_memory`` and perf_analyzer give it; it may not be a path, so a client can
only ever map an object it created in ``/dev/shm``. Errors name the key, never the server's paths.
"""

from __future__ import annotations

import mmap
import os
import stat
from pathlib import Path

from conch.core.errors import InvalidArgumentError

SHM_DIR = Path("/dev/shm")


def object_name(key: str) -> str:
    """The name in ``/dev/shm`` that ``key`` denotes, or a 400 when it is not a plain name."""
    name = key[1:] if key.startswith("/") else key
    if not name or "/" in name or "\0" in name or name in (".", ".."):
        raise InvalidArgumentError(
            f"invalid shared memory key '{key}': a key names a POSIX shared memory object, such as "
            "'/input_data' (one optional leading '/', then a name without '/'), not a path"
        )
    return name


def map_object(key: str) -> mmap.mmap:
    """The whole object ``key`` mapped read-write; the descriptor is closed once mapped."""
    path = SHM_DIR / object_name(key)
    try:
        descriptor = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
    except OSError:
        raise InvalidArgumentError(
            f"Unable to open shared memory region: '{key}'; create it first (shm_open, or tritonclient's "
            "create_shared_memory_region) and register it by the same key"
        ) from None
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            raise InvalidArgumentError(f"Invalid shared memory region: '{key}' is not a shared memory object")
        size = status.st_size
        if size == 0:
            raise InvalidArgumentError(f"Invalid shared memory region: '{key}' is empty; give it a size")
        return mmap.mmap(descriptor, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(descriptor)
