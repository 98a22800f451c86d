"""``/v2/systemsharedmemory[/region/{name}]/status|register|unregister``, and the CUDA routes:
nothing can be registered there, so status lists no region and register is refused.

The bodies are Triton's: status answers ``[{"name", "key", "offset", "byte_size"}]``; register takes
``{"key", "offset", "byte_size"}``; unregister without a region name unregisters every region.
"""

from __future__ import annotations

from typing import Any

from conch.core.errors import InvalidArgumentError, NotFoundError
from conch.frontends.http.body import read_body
from conch.frontends.http.infer_codec import load_json_object
from conch.frontends.http.replies import Receive, Reply, Scope, json_reply, require
from conch.shared_memory.registry import CUDA_REFUSAL, SharedMemoryRegistry, cuda_status

__all__ = ["CUDA_REFUSAL", "answer", "parse_route", "reply"]


async def reply(
    registry: SharedMemoryRegistry,
    scope: Scope,
    receive: Receive,
    route: list[str],
    max_body_bytes: int,
    json_depth: int,
) -> Reply:
    """The answer to ``/v2/{system,cuda}sharedmemory/...``, ``route`` being the path after ``/v2``."""
    parsed = parse_route(route)
    if parsed is None:
        raise NotFoundError(f"no route for {scope['path']}")
    region, action = parsed
    require(scope["method"], "GET" if action == "status" else "POST")
    if route[0] == "cudasharedmemory":
        if action == "unregister":  # nothing can be registered, so nothing is left registered
            return 200, b"", []
        if action == "status":
            return json_reply(200, cuda_status(region))
        raise InvalidArgumentError(CUDA_REFUSAL)
    body = await read_body(scope, receive, max_body_bytes) if action == "register" else b""
    document = load_json_object(body, json_depth) if body else {}
    answer_of = answer(registry, region, action, document)
    return (200, b"", []) if answer_of is None else json_reply(200, answer_of)


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
