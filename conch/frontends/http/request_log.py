"""An HTTP inference's request id and log record, taken from its ASGI exchange.

:class:`InferenceExchange` stands between the app and uvicorn's ``send`` for the inference routes
(``infer``, ``generate``, ``generate_stream``): the answer's start gets the ``x-request-id`` header,
its status ends the record (docs/observability.md). Why at the ASGI edge: every answer passes there,
the gateway's refusals and a 404 before the body was read included, so no route has to remember to
log, and a stream's record ends when its last event has gone.

The echo is always on: it costs a look at the headers and one more header (about 1 us), and a
client that names its requests gets its name back. The record itself is written only when
``--log-inferences`` or the audit sample asks for one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from conch.observability.inference_log import REQUEST_ID_HEADER, InferenceLog, begin

Send = Callable[[dict[str, Any]], Awaitable[None]]

_HEADER = REQUEST_ID_HEADER.encode()
_ENDPOINTS = ("/infer", "/generate", "/generate_stream")


def is_inference(path: str) -> bool:
    """Whether ``path`` is an inference route (a model's ``infer``, ``generate`` or ``generate_stream``)."""
    return path.endswith(_ENDPOINTS) and path.startswith("/v2/models/") and path.count("/") >= 4


class InferenceExchange:
    """One HTTP inference: wraps ``send`` to echo the request id and end the record with the status."""

    __slots__ = ("_journal", "_record", "_send", "_status")

    def __init__(self, journal: InferenceLog | None, scope: dict[str, Any], send: Send) -> None:
        self._send = send
        self._journal = journal
        path = scope["path"]
        endpoint = path.rsplit("/", 1)[-1]
        model, version = _model_of(path) if journal is not None else ("", "")
        self._record = begin(journal, "HTTP", endpoint, model, version, _header(scope))
        self._status = 0

    async def send(self, message: dict[str, Any]) -> None:
        record = self._record
        if message["type"] == "http.response.start":
            self._status = message["status"]
            message["headers"].append((_HEADER, record.request_id.encode()))
        elif self._status >= 400 and record.error is None and (record.logged or record.audited):
            record.error = _error_of(message.get("body", b""))
        await self._send(message)
        last = message["type"] == "http.response.body" and not message.get("more_body")
        if last and self._journal is not None:
            self._journal.finish(record, self._status)


def _header(scope: dict[str, Any]) -> str | None:
    for key, value in scope["headers"]:
        if key == _HEADER:
            return bytes(value).decode("latin-1")
    return None


def _model_of(path: str) -> tuple[str, str]:
    """``/v2/models/{m}[/versions/{v}]/infer``: the model and version the path names."""
    parts = path.strip("/").split("/")
    model = parts[2] if len(parts) > 2 else ""
    version = parts[4] if len(parts) > 5 and parts[3] == "versions" else ""
    return model, version


def _error_of(body: bytes) -> str:
    """The message of an error answer (``{"error": "..."}``)."""
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        return ""
    return str(document.get("error", "")) if isinstance(document, dict) else ""
