"""How the HTTP app reads a request's headers and writes its answers: the ASGI types, V2's
``{"error": ...}`` bodies, a refusal's status and headers, and the lifespan protocol.

Kept apart from the routes (:mod:`conch.frontends.http.app`) so that every route answers the same way.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from conch.core.errors import ConchError, MethodNotAllowedError
from conch.frontends.http import infer_codec

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
#: An answer: status, body and headers.
Reply = tuple[int, bytes, list[tuple[bytes, bytes]]]


def request_header(scope: Scope, name: bytes) -> str | None:
    """A request header's value (ASGI lowercases names), or None."""
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value).decode("latin-1")
    return None


def header_length(scope: Scope) -> int | None:
    for key, value in scope["headers"]:
        if key == b"inference-header-content-length":
            return infer_codec.header_length(value)
    return None


def require(method: str, *allowed: str) -> None:
    """A 405 naming ``allowed`` (in its ``Allow`` header too) unless ``method`` is one of them."""
    if method not in allowed:
        raise MethodNotAllowedError(method, allowed)


def get_json(method: str, produce: Callable[[], Any]) -> Reply:
    require(method, "GET")
    return json_reply(200, produce())


def json_reply(status: int, document: Any) -> Reply:
    return status, orjson.dumps(document), [(b"content-type", b"application/json")]


def error_reply(status: int, message: str) -> Reply:
    return json_reply(status, {"error": message})


def refusal(exc: ConchError) -> Reply:
    """A ConchError's answer: its status, ``{"error": message}`` and the headers it carries."""
    status, body, headers = error_reply(exc.kind.http_status, exc.message)
    headers.extend((name.encode(), value.encode("latin-1")) for name, value in exc.headers)
    return status, body, headers


async def lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
