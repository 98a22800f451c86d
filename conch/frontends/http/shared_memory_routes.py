"""``/v2/systemsharedmemory[/region/{name}]/status|register|unregister``, and the CUDA routes' refusal.

The bodies are Triton's: status answers ``[{"name", "key", "offset", "byte_size"}]``; register takes
``{"key", "offset", "byte_size"}``; unregister without a region name unregisters every region.
"""

from __future__ import annotations

from typing import Any

from conch.core.errors import InvalidArgumentError
from conch.shared_memory.registry import CUDA_REFUSAL, SharedMemoryRegistry

__all__ = ["CUDA_REFUSAL", "answer", "parse_route"]


def parse_route(route: list[str]) -> tuple[str, str] | None:
    """``(region name, action)`` of a shared-memory route after its first part, or None if it is none."""
    if len(route) == 2 and route[1] in ("status", "register", "unregister"):
        return "", route[1]
    if len(route) == 4 and route[1] == "region" and route[3] in ("status", "register", "unregister"):
        return route[2], route[3]
    return None


def answer(registry: SharedMemoryRegistry, region: str, action: str, document: dict[str, Any]) -> Any:
    """The JSON answer of ``action`` (None: an empty 200), ``document`` being the request body."""
    if action == "status":
        return registry.status(region)
    if action == "unregister":
        registry.unregister(region)
        return None
    if not region:
        raise InvalidArgumentError("'region name' is necessary to register system shared memory region")
    key = document.get("key")
    if not isinstance(key, str):
        raise InvalidArgumentError("Shared memory register request has no 'key' field (a string)")
    if "byte_size" not in document:
        raise InvalidArgumentError("Shared memory register request has no 'byte_size' field")
    registry.register(region, key, _whole(document, "offset"), _whole(document, "byte_size"))
    return None


def _whole(document: dict[str, Any], field: str) -> int:
    value = document.get(field, 0)
    if type(value) is not int or value < 0:
        raise InvalidArgumentError(
            f"Shared memory register request: '{field}' must be a whole number >= 0, got {value!r}"
        )
    return value
