"""An HTTP inference's request id and log record, taken from its ASGI exchange.

:func:`watched_send` stands between the app and the server's ``send`` for the inference routes
(``infer``, ``generate``, ``generate_stream``): the answer's start gets the ``x-request-id`` header,
its status ends the record (docs/observability.md). Why at the ASGI edge: every answer passes there,
the gateway's refusals and a 404 before the body was read included, so no route has to remember to
log, and a stream's record ends when its last event has gone.

With ``--log-inferences`` or the audit sample, every answer carries the record's ``request_id``.
Without them, an answer echoes the ``x-request-id`` the client sent, and one without it is sent as
it was: a record's object, its context and a generated id cost the default path 4 us a request
(measured, against 150 us for a whole small HTTP inference); a look at the headers costs 0.5 us.
"""

from __future__ import annotations

from typing import Any

import orjson

from conch.frontends.http.replies import Send, request_header
from conch.observability.inference_log import REQUEST_ID_HEADER, InferenceLog, begin, usable_id

_HEADER = REQUEST_ID_HEADER.encode()
_ENDPOINTS = ("/infer", "/generate", "/generate_stream")


def is_inference(path: str) -> bool:
    """Whether ``path`` is an inference route (a model's ``infer``, ``generate`` or ``generate_stream``)."""
    return path.endswith(_ENDPOINTS) and path.startswith("/v2/models/") and path.count("/") >= 4


def watched_send(journal: InferenceLog | None, scope: dict[str, Any], send: Send) -> Send:
    """``send`` for an inference's answer: recording it in ``journal``, or only echoing the client's
    request id; ``send`` itself when there is neither."""
    header = request_header(scope, _HEADER)
    if journal is not None:
        return InferenceExchange(journal, scope, send, header).send
    if not usable_id(header):
        return send
    assert header is not None
    echo = (_HEADER, header.encode())

    async def echoing(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            message["headers"].append(echo)
        await send(message)

    return echoing


class InferenceExchange:
    """One HTTP inference: wraps ``send`` to echo the request id and end the record with the status."""

    __slots__ = ("_journal", "_record", "_send", "_status")

    def __init__(self, journal: InferenceLog, scope: dict[str, Any], send: Send, header: str | None) -> None:
        self._send = send
        self._journal = journal
        path = scope["path"]
        model, version = _model_of(path)
        self._record = begin(journal, "HTTP", path.rsplit("/", 1)[-1], model, version, header)
        self._status = 0

    async def send(self, message: dict[str, Any]) -> None:
        record = self._record
        if message["type"] == "http.response.start":
            self._status = message["status"]
            message["headers"].append((_HEADER, record.request_id.encode()))
        elif self._status >= 400 and record.error is None and (record.logged or record.audited):
            record.error = _error_of(message.get("body", b""))
        await self._send(message)
        if message["type"] == "http.response.body" and not message.get("more_body"):
            self._journal.finish(record, self._status)


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
