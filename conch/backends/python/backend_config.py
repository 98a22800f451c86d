"""``--backend-config python,<key>=<value>``: the Python backend's server-wide settings, Triton's way.

Known keys, as Triton's python backend names them:

- ``shm-default-byte-size``: the size of each shared memory segment a model process and the server
  write tensors into (default 1 MiB);
- ``shm-growth-byte-size``: the step by which a segment grows past that for a bigger batch (default
  1 MiB).

Other backends' entries (``onnxruntime,...``) and unknown keys are refused, so a typo is not a silent
no-op. This module imports nothing heavy: the command line parses it.
"""

from __future__ import annotations

from dataclasses import dataclass

KEYS = ("shm-default-byte-size", "shm-growth-byte-size")
#: The smallest segment conch accepts: a segment must hold at least one small tensor.
MIN_BYTES = 4096


@dataclass(frozen=True)
class BackendSetting:
    """One ``--backend-config`` entry."""

    backend: str
    key: str
    value: int


def parse_backend_setting(text: str) -> BackendSetting:
    """``python,shm-default-byte-size=4194304`` as a setting; ValueError with the fix otherwise."""
    backend, _, assignment = text.partition(",")
    key, equals, value = assignment.partition("=")
    if not equals or not key:
        raise ValueError(
            f"'{text}' is not <backend>,<key>=<value>, e.g. python,shm-default-byte-size=4194304"
        )
    if backend != "python":
        raise ValueError(f"'{text}': conch takes --backend-config for the python backend only")
    if key not in KEYS:
        raise ValueError(f"'{text}': the python backend has no setting '{key}'; it has {', '.join(KEYS)}")
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"'{text}': {key} must be a number of bytes") from None
    if number < MIN_BYTES:
        raise ValueError(f"'{text}': {key} must be at least {MIN_BYTES} bytes")
    return BackendSetting(backend, key, number)


def shared_memory_sizes(settings: tuple[BackendSetting, ...]) -> dict[str, int]:
    """The sizes the settings choose, by key (the last entry of a key wins, as on Triton)."""
    return {setting.key: setting.value for setting in settings if setting.backend == "python"}
