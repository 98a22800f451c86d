"""A proxy process's HTTP app: inference decoded and encoded here, everything else relayed.

``POST .../infer`` is decoded into a request in this process, answered by the model process through
shared memory and encoded here, with the same codec and headers as in one process. Any other
request, an inference that names a client's shared-memory region and one that does not decode go
whole to the model process's own HTTP app, so management APIs, the status page, shared memory, streams and
the gateway behave exactly as in one process. With the gateway, inference logs or traces on, every
request is relayed (they keep per-server state: rate limits, audit files, spans).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from conch.core.data_lineage import copy_headers
from conch.core.errors import ConchError
from conch.frontends.http import infer_codec
from conch.frontends.http.app import infer_reply
from conch.frontends.http.body import read_body
from conch.frontends.http.replies import Reply, error_reply, header_length, lifespan, refusal, request_header
from conch.frontends.http.request_log import watched_send
from conch.router.release_split import ROUTE_KEY_HEADER
from conch.runtime.model_link import ModelLink
from conch.shared_memory.tensors import RegionLeases

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
_ROUTE_KEY = ROUTE_KEY_HEADER.encode()
_RELAYED_HEADERS = frozenset({b"content-length", b"content-encoding", b"transfer-encoding"})


class NeedsModelProcess(Exception):
    """Only the model process can answer this request: it names a client's shared-memory region
    (the model process holds them), or it does not decode (the model process words the error)."""


class RegionsElsewhere(RegionLeases):
    """Stands in for the registry while decoding here: a region sends the request on whole."""

    def __init__(self) -> None:
        super().__init__(registry=None)  # type: ignore[arg-type]

    def read_input(self, *args: Any, **kwargs: Any) -> Any:
        raise NeedsModelProcess

    def check_output(self, *args: Any, **kwargs: Any) -> None:
        raise NeedsModelProcess


class ProxyHttpApp:
    """ASGI app of one proxy process."""

    def __init__(self, link: ModelLink, max_body_bytes: int, json_depth: int, decode_here: bool) -> None:
        self.link = link
        self.max_body_bytes = max_body_bytes
        self.json_depth = json_depth
        self.decode_here = decode_here

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        try:
            body = await read_body(scope, receive, self.max_body_bytes)
        except ConchError as exc:
            refused = refusal(exc)
            self.link.note_refusal(refused[0])
            await self._answer(send, refused)
            return
        route = _infer_route(scope) if self.decode_here else None
        if route is not None:
            try:
                reply = await self._infer(scope, body, *route)
            except NeedsModelProcess:
                reply = None
            if reply is not None:
                await self._answer(watched_send(None, scope, send), reply)
                return
        await self._relay(scope, body, send)

    async def _infer(self, scope: dict[str, Any], body: bytes, name: str, version: str) -> Reply:
        # A request this process cannot decode goes to the model process whole: there, an unknown
        # model is a 404 before the body is looked at, as in one process. Only bad requests pay.
        try:
            request = infer_codec.decode_request(
                body, header_length(scope), name, version, RegionsElsewhere(), self.json_depth
            )
        except ConchError:
            raise NeedsModelProcess from None
        copy_headers(request.parameters, lambda header: request_header(scope, header.encode()))
        try:
            response = await self.link.infer(
                request, "HTTP", "HTTP end point", request_header(scope, _ROUTE_KEY)
            )
        except ConchError as exc:  # counted by the model process
            return refusal(exc)
        return infer_reply(scope, request, response)

    async def _relay(self, scope: dict[str, Any], body: bytes, send: Send) -> None:
        relayed = {key: value for key, value in scope.items() if key != "state"}
        relayed["headers"] = [(k, v) for k, v in scope["headers"] if k not in _RELAYED_HEADERS]
        relayed["headers"].append((b"content-length", str(len(body)).encode()))
        started = False
        try:
            async for piece in self.link.http(relayed, body):
                if piece["op"] == "http_start":
                    started = True
                    await send(
                        {
                            "type": "http.response.start",
                            "status": piece["status"],
                            "headers": piece["headers"],
                        }
                    )
                elif piece["op"] == "http_body":
                    await send(
                        {"type": "http.response.body", "body": piece["body"], "more_body": piece["more"]}
                    )
                elif not started:  # http_failed: the model process's app raised
                    await self._answer(send, error_reply(500, "internal server error"))
                    return
        except ConchError as exc:
            if not started:
                await self._answer(send, refusal(exc))

    async def _answer(self, send: Send, reply: Reply) -> None:
        status, body, headers = reply
        headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _infer_route(scope: dict[str, Any]) -> tuple[str, str] | None:
    """(model, version) of ``POST /v2/models/M[/versions/V]/infer``; None for any other request."""
    if scope["method"] != "POST":
        return None
    parts = scope["path"].split("/")
    if len(parts) == 5 and parts[:3] == ["", "v2", "models"] and parts[4] == "infer":
        return parts[3], ""
    if (
        len(parts) == 7
        and parts[:3] == ["", "v2", "models"]
        and parts[4] == "versions"
        and parts[6] == "infer"
    ):
        return parts[3], parts[5]
    return None
