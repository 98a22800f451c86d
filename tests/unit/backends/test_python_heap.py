"""conch_heap: a freed large buffer stays in the process's heap for the next one (glibc)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

#: Frees an 8 MiB buffer, then prints what glibc's main arena holds free (``mallinfo2().fordblks``).
PROBE = """
import ctypes, sys
from conch.backends.python.stub import conch_heap

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
                 "fordblks", "keepcost")]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
kept = conch_heap.keep_freed_memory() if sys.argv[1] == "keep" else False
buffer = bytearray(8 << 20)
del buffer
print(kept, libc.mallinfo2().fordblks)
"""


def _glibc() -> bool:
    try:
        return (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")
    except (ValueError, OSError):
        return False


needs_glibc = pytest.mark.skipif(not _glibc(), reason="glibc's mallopt")


def _probe(mode: str, **env: str) -> tuple[str, int]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, mode],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **env},
    )
    kept, free = done.stdout.split()
    return kept, int(free)


@needs_glibc
def test_a_freed_large_buffer_is_kept_in_the_heap() -> None:
    kept, free = _probe("keep")
    assert kept == "True"
    assert free >= 8 << 20
    _, free_by_default = _probe("default")
    assert free_by_default < 8 << 20  # glibc's own default maps it and gives it back


@needs_glibc
def test_the_users_own_malloc_setting_wins() -> None:
    kept, free = _probe("keep", MALLOC_TRIM_THRESHOLD_="131072")
    assert kept == "False"
    assert free < 8 << 20
