"""The V2 REST routes as a raw ASGI application.

A framework's routing and request objects cost more per call than the whole JSON decode of a small
request, so this app reads the ASGI scope directly: one split of the path, one dict of handlers.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

from conch.core.data_lineage import copy_headers
from conch.core.errors import ConchError, ErrorKind, InvalidArgumentError, NotFoundError
from conch.core.types import InferenceRequest, InferenceResponse
from conch.frontends.http import generate, infer_codec, openapi, shared_memory_routes
from conch.frontends.http.body import compress_for, read_body
from conch.frontends.http.deep_health import DeepHealth
from conch.frontends.http.limits import HttpLimits
from conch.frontends.http.replies import (
    Receive,
    Reply,
    Scope,
    Send,
    error_reply,
    get_json,
    header_length,
    json_reply,
    lifespan,
    refusal,
    request_header,
    require,
)
from conch.frontends.http.request_log import is_inference, watched_send
from conch.frontends.http.unread_body import CLOSE_HEADER, DRAIN_CAP, TrackedReceive, worth_draining
from conch.frontends.inference import answer as answer_request
from conch.gateway.api_groups import http_call
from conch.gateway.gateway import Gateway
from conch.observability import log_settings, tracing
from conch.observability.inference_log import InferenceLog, note_request, note_response
from conch.observability.tracing import RequestTrace
from conch.release.signed_actions import SIGNED_ACTIONS
from conch.router.release_split import ROUTE_KEY_HEADER
from conch.server import InferenceServer
from conch.shared_memory.registry import registry_of
from conch.shared_memory.tensors import RegionLeases
from conch.status_page.page import StatusPage, is_status_path

log = logging.getLogger(__name__)


_NOT_READY = 503
#: Where :meth:`HttpFrontend._admit` leaves a token's grant for the listings to filter.
GRANT_KEY = "conch.grant"
ROUTE_KEY_HEADER_BYTES = ROUTE_KEY_HEADER.encode()


class HttpFrontend:
    """ASGI app serving KServe V2 and Triton's HTTP extensions for one :class:`InferenceServer`."""

    def __init__(
        self,
        server: InferenceServer,
        limits: HttpLimits | None = None,
        deep_health: DeepHealth | None = None,
        codes: Counter[int] | None = None,
        gateway: Gateway | None = None,
        inference_log: InferenceLog | None = None,
    ) -> None:
        self.server = server
        #: ``--log-inferences`` and the audit sample; None when both are off.
        self.inference_log = inference_log
        #: Answers by HTTP status (``conch_requests_total{protocol="http"}``).
        self.codes: Counter[int] = Counter() if codes is None else codes
        #: Auth, restricted APIs, rate limits and the in-flight cap; None when all are off.
        self.gateway = gateway
        #: ``--http-max-body-bytes`` and ``--http-max-json-depth``.
        limits = limits or HttpLimits()
        self.max_body_bytes, self.json_depth = limits.max_body_bytes, limits.max_json_depth
        #: ``GET /v2/health/deep``'s checker; the default settings when ``conch serve`` gives none.
        self.deep_health = deep_health or DeepHealth(server)
        #: The system shared-memory regions, shared with the gRPC frontend of the same server.
        self.regions = registry_of(server)
        #: ``/`` and ``/ui``: the status page and its data.
        self.status_page = StatusPage(server)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        if is_inference(scope["path"]):  # the x-request-id echo and the inference's log record
            send = watched_send(self.inference_log, scope, send)
        admitted: list[tuple[bytes, bytes]] = []
        receive = tracked = TrackedReceive(receive)
        if self.gateway is not None:
            try:
                admitted = self._admit(scope)
            except ConchError as exc:
                status, body, headers = refusal(exc)
                await self._send(send, status, body, await self._unread_body(scope, tracked, status, headers))
                return
        if scope["path"].endswith("/generate_stream"):
            await self._generate_stream(scope, receive, send)
            return
        try:
            status, body, headers = await self._dispatch(scope, receive)
        except ConchError as exc:
            status, body, headers = refusal(exc)
        except Exception:
            log.exception("unhandled error on %s %s", scope["method"], scope["path"])
            status, body, headers = error_reply(ErrorKind.INTERNAL.http_status, "internal server error")
        if admitted:
            headers.extend(admitted)
        await self._send(send, status, body, await self._unread_body(scope, tracked, status, headers))

    async def _unread_body(
        self, scope: Scope, tracked: TrackedReceive, status: int, headers: list[tuple[bytes, bytes]]
    ) -> list[tuple[bytes, bytes]]:
        """``headers``, after reading off what the answer left of the request body (see
        :mod:`conch.frontends.http.unread_body`), with ``Connection: close`` where it was too large."""
        if tracked.finished:
            return headers
        drained = status != ErrorKind.TOO_LARGE.http_status and worth_draining(scope, tracked)
        if not drained or not await tracked.drain(min(self.max_body_bytes, DRAIN_CAP)):
            headers.append(CLOSE_HEADER)
        return headers

    async def _send(self, send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
        self.codes[status] += 1
        headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def _admit(self, scope: Scope) -> list[tuple[bytes, bytes]]:
        """The gateway's verdict on a request: the headers to add to its answer, or a ConchError.

        A token limited to some models leaves its grant in the scope for the listings to filter.
        """
        assert self.gateway is not None
        call = http_call(scope["method"], scope["path"])
        client = scope.get("client")
        peer = str(client[0]) if client else ""
        grant, headers = self.gateway.admit(
            "HTTP", call, lambda name: request_header(scope, name.encode()), peer
        )
        if (call.listing and not grant.every_model) or grant.subject:
            scope[GRANT_KEY] = grant
        return [(name.encode(), value.encode("latin-1")) for name, value in headers]

    async def _dispatch(self, scope: Scope, receive: Receive) -> Reply:
        method = scope["method"]
        parts = scope["path"].strip("/").split("/")
        if not parts or parts[0] != "v2":
            if is_status_path(scope["path"]):  # checked off the /v2 path only: V2 calls pay nothing
                return await self.status_page.answer(method, scope["path"], scope.get(GRANT_KEY))
            raise NotFoundError(f"no route for {scope['path']}")
        route = parts[1:]
        if not route:
            return get_json(method, self.server.metadata)
        if route == ["openapi.yaml"]:
            require(method, "GET")
            return 200, openapi.document(), [(b"content-type", openapi.CONTENT_TYPE)]
        if route == ["health", "deep"]:
            require(method, "GET")
            evaluation = await self.deep_health.evaluate()
            return json_reply(200 if evaluation.healthy else _NOT_READY, evaluation.to_json())
        if route[0] == "health" and len(route) == 2 and route[1] in ("live", "ready"):
            require(method, "GET")
            if route[1] == "live":
                return (200, b"", []) if self.server.live() else error_reply(_NOT_READY, "server is not live")
            return (
                (200, b"", [])
                if self.server.ready()
                else error_reply(_NOT_READY, self.server.not_ready_reason())
            )
        if route == ["repository", "index"]:
            require(method, "POST")
            body = await read_body(scope, receive, self.max_body_bytes)
            ready_only = self._body_object(body).get("ready", False)
            if not isinstance(ready_only, bool):
                raise InvalidArgumentError("'ready' must be true or false")
            entries = self.server.repository_index(ready_only, folders=True)
            grant = scope.get(GRANT_KEY)
            if grant is not None:
                entries = [entry for entry in entries if grant.may_see(entry["name"])]
            return json_reply(200, entries)
        if len(route) == 4 and route[:2] == ["repository", "models"] and route[3] in ("load", "unload"):
            require(method, "POST")
            body = await read_body(scope, receive, self.max_body_bytes)
            parameters = self._body_object(body).get("parameters", {})
            if not isinstance(parameters, dict):
                raise InvalidArgumentError("'parameters' must be a JSON object")
            if route[3] == "load":
                await self.server.load_model(route[2], parameters)
            else:
                await self.server.unload_model(route[2], parameters)
            return 200, b"", []
        if route[0] in ("systemsharedmemory", "cudasharedmemory"):
            return await shared_memory_routes.reply(
                self.regions, scope, receive, route, self.max_body_bytes, self.json_depth
            )
        if route == ["models", "stats"]:
            require(method, "GET")
            stats = await self.server.statistics()
            grant = scope.get(GRANT_KEY)
            if grant is not None:
                stats["model_stats"] = [s for s in stats["model_stats"] if grant.may_see(s["name"])]
            return json_reply(200, stats)
        if route in (["trace", "setting"], ["models", *route[1:2], "trace", "setting"]):
            return await self._trace_setting(scope, receive, method, route[1] if len(route) == 4 else "")
        if route[0] == "models" and len(route) >= 2:
            return await self._model_route(scope, receive, method, route[1], route[2:])
        if route == ["logging"]:
            body = await read_body(scope, receive, self.max_body_bytes) if method == "POST" else b""
            return json_reply(200, log_settings.answer(method, self._body_object(body)))
        raise NotFoundError(f"no route for {scope['path']}")

    async def _model_route(
        self, scope: Scope, receive: Receive, method: str, name: str, rest: list[str]
    ) -> Reply:
        version = ""
        if len(rest) >= 2 and rest[0] == "versions":
            version, rest = rest[1], rest[2:]
        if rest and rest[0] == "release" and len(rest) <= 2:
            return await self._release_route(scope, receive, method, name, rest[1:])
        action = rest[0] if len(rest) == 1 else "" if not rest else None
        if action == "":
            return get_json(method, lambda: self.server.model_metadata(name, version))
        if action == "ready":
            require(method, "GET")
            ready = await self.server.model_ready(name, version)
            return (200, b"", []) if ready else error_reply(_NOT_READY, f"model '{name}' is not ready")
        if action == "config":
            return get_json(method, lambda: self.server.model_config(name, version))
        if action == "stats":
            require(method, "GET")
            return json_reply(200, await self.server.statistics(name, version))
        if action == "infer":
            require(method, "POST")
            if tracing.tracer is not None:
                return await tracing.http_request(
                    scope, name, version, lambda trace: self._infer(scope, receive, name, version, trace)
                )
            return await self._infer(scope, receive, name, version)
        if action == "generate":
            require(method, "POST")
            return await self._generate(scope, receive, name, version)
        raise NotFoundError(f"no route for {scope['path']}")

    async def _generate(self, scope: Scope, receive: Receive, name: str, version: str) -> Reply:
        """``/generate``: exactly one response, of any model (a decoupled one must send just one)."""
        responses = [r async for r in self._generate_responses(scope, receive, name, version)]
        for response in responses:
            if isinstance(response, ConchError):
                raise response
        if len(responses) != 1:
            raise InvalidArgumentError(
                f"model '{name}' sent {len(responses)} responses to a generate request, which answers "
                f"exactly one; use POST /v2/models/{name}/generate_stream"
            )
        assert isinstance(responses[0], InferenceResponse)
        return json_reply(200, generate.encode_generate(responses[0]))

    async def _generate_responses(
        self, scope: Scope, receive: Receive, name: str, version: str
    ) -> AsyncIterator[InferenceResponse | ConchError]:
        served = self.server.model_version(name, version)
        body = await read_body(scope, receive, self.max_body_bytes)
        request = generate.decode_generate(body, name, version, served)
        note_request(request)
        async for response in self.server.infer_stream(request):
            note_response(response)
            yield response

    async def _generate_stream(self, scope: Scope, receive: Receive, send: Send) -> None:
        """``/generate_stream``: each response as a server-sent event as it comes. An error before
        the first is a plain JSON error with its status; after it, an ``error`` event."""
        parts = scope["path"].strip("/").split("/")
        status, body, headers = error_reply(404, f"no route for {scope['path']}")
        responses: AsyncIterator[InferenceResponse | ConchError] | None = None
        first: InferenceResponse | ConchError | None = None
        try:
            if (
                parts[:2] == ["v2", "models"]
                and len(parts) in (4, 6)
                and (len(parts) == 4 or parts[3] == "versions")
            ):
                require(scope["method"], "POST")
                responses = self._generate_responses(
                    scope, receive, parts[2], parts[4] if len(parts) == 6 else ""
                )
                first = await anext(responses, None)
        except ConchError as exc:
            status, body, headers = refusal(exc)
            responses = None
        if responses is None:
            await self._send(send, status, body, headers)
            return
        self.codes[200] += 1
        start = {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", generate.SSE_CONTENT_TYPE)],
        }
        await send(start)

        async def chunk(body: bytes) -> None:
            await send({"type": "http.response.body", "body": body, "more_body": True})

        try:
            if first is not None:
                await chunk(generate.event_of(first))
            async for response in responses:
                await chunk(generate.event_of(response))
        except ConchError as exc:
            await chunk(generate.event_of(exc))
        except Exception:
            log.exception("generate_stream on %s failed", scope["path"])
            await chunk(generate.event({"error": "internal server error"}))
        await send({"type": "http.response.body", "body": b""})

    async def _release_route(
        self, scope: Scope, receive: Receive, method: str, name: str, action: list[str]
    ) -> Reply:
        """``GET|POST /v2/models/{m}/release`` and ``POST /v2/models/{m}/release/{action}``."""
        if not action and method == "GET":
            return json_reply(200, self.server.release_status(name))
        if action:
            require(method, "POST")
        else:
            require(method, "GET", "POST")
        if action and action[0] not in SIGNED_ACTIONS:
            return json_reply(200, self.server.release_action(name, action[0]))
        body = await read_body(scope, receive, self.max_body_bytes)
        document = infer_codec.load_json_object(body, self.json_depth) if body or not action else {}
        if action:
            grant = scope.get(GRANT_KEY)
            subject = grant.subject if grant is not None else ""
            return json_reply(200, self.server.signed_release_action(name, action[0], document, subject))
        return json_reply(200, self.server.start_release(name, document))

    async def _trace_setting(self, scope: Scope, receive: Receive, method: str, model: str) -> Reply:
        """``GET|POST /v2[/models/{m}]/trace/setting``: Triton's trace extension."""
        if method == "GET":
            return json_reply(200, self.server.trace_settings(model))
        require(method, "GET", "POST")
        body = await read_body(scope, receive, self.max_body_bytes)
        return json_reply(200, self.server.trace_settings(model, self._body_object(body)))

    def _body_object(self, body: bytes) -> dict[str, Any]:
        """A JSON object body, ``{}`` when there is none (the optional bodies of index, load, register)."""
        return infer_codec.load_json_object(body, self.json_depth) if body else {}

    async def _infer(
        self, scope: Scope, receive: Receive, name: str, version: str, trace: RequestTrace | None = None
    ) -> Reply:
        self.server.repository.model(name)  # 404 before reading a large body (a fallback may still answer)
        body = await read_body(scope, receive, self.max_body_bytes)
        json_length = header_length(scope)
        leases = RegionLeases(self.regions)
        try:
            if trace is not None:
                trace.begin("decode")
            request = infer_codec.decode_request(body, json_length, name, version, leases, self.json_depth)
            if trace is not None:
                trace.end_stage()
                request.trace = trace
            route_key = request_header(scope, ROUTE_KEY_HEADER_BYTES)
            copy_headers(request.parameters, lambda header: request_header(scope, header.encode()))
            response = await answer_request(self.server, request, leases, "HTTP end point", route_key)
        finally:
            leases.release()
        if trace is not None:
            trace.begin("encode")
        return infer_reply(scope, request, response)


def infer_reply(scope: Scope, request: InferenceRequest, response: InferenceResponse) -> Reply:
    """An inference's 200 answer: JSON or the binary extension, the fallback header, compressed as
    the client accepts (the proxy processes of ``--proxies`` answer with this too)."""
    payload, json_length = infer_codec.encode_response(response, request)
    if json_length is None:
        headers = [(b"content-type", infer_codec.JSON_CONTENT_TYPE)]
    else:
        headers = [
            (b"content-type", infer_codec.BINARY_CONTENT_TYPE),
            (b"inference-header-content-length", str(json_length).encode()),
        ]
    if "fallback_level" in response.parameters:
        headers.append((b"conch-fallback", str(response.parameters["fallback_level"]).encode()))
    payload, encoding = compress_for(scope, payload)
    if encoding is not None:
        headers.append((b"content-encoding", encoding))
    return 200, payload, headers
