"""Triton's system shared-memory extension: regions a client registers, read and written by requests.

``posix.py`` opens and maps a POSIX shared-memory object (``/dev/shm/<key>``); ``registry.py`` keeps
the registered regions with their checks (names, offsets and sizes against the region on every use,
unregistering a region in use); ``tensors.py`` reads a request's inputs from regions and writes its
outputs into them, for both frontends.
"""

from conch.shared_memory.registry import SharedMemoryRegistry, registry_of

__all__ = ["SharedMemoryRegistry", "registry_of"]
