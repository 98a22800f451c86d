"""The audit sample: a fraction of inferences written whole (request and responses) to their own file.

Why a sample and a separate file: an audit must be able to replay what a model was asked and what it
answered, but bodies are large and may be personal data, so only ``--log-sample-bodies`` of the
inferences (0.01: one in a hundred, drawn at random) are kept, apart from the operational log, in
``--audit-log`` (JSON lines through the same formatter as the log). Inputs named in
``--log-redact`` (and outputs of those names) are never written: their place holds their hash
(:func:`conch.observability.input_hash.tensor_hash`), so an auditor can still check that a given
value was the one sent, without the file holding it.

The body is taken from the decoded tensors, never from the raw request bytes, so a redacted input
cannot reach the file in another form; a request that could not be decoded is audited without one.

The file is rotated at ``--audit-log-max-mb`` with :data:`BACKUPS` older files kept (``FILE.1`` ...),
so it never fills a disk. Lines are written by :class:`logging.handlers.QueueListener`'s thread: the
request path only queues a record.
"""

from __future__ import annotations

import atexit
import base64
import logging
import queue
import random
from collections.abc import Collection
from logging.handlers import QueueHandler, QueueListener, RotatingFileHandler
from typing import Any

from conch.core.types import InferenceRequest, InferenceResponse, Tensor
from conch.observability.input_hash import tensor_hash
from conch.observability.log_format import JsonFormatter

#: Older files kept beside the one being written: at most (1 + BACKUPS) x --audit-log-max-mb on disk.
BACKUPS = 3
AUDIT_EVENT = "inference_audit"
#: A release decision taken on this server (a rejection, a promotion, an approval, a re-admission):
#: every one is written, none is sampled, so the file answers "who let this version serve, and when".
RELEASE_EVENT = "release_verdict"


class AuditLog:
    """Draws the sample and writes its bodies, redacted, to a rotated file of JSON lines."""

    def __init__(self, path: str, ratio: float, redact: Collection[str], max_bytes: int) -> None:
        self.ratio = ratio
        self.redact = frozenset(redact)
        self._file = RotatingFileHandler(path, maxBytes=max_bytes, backupCount=BACKUPS, encoding="utf-8")
        self._file.setFormatter(JsonFormatter())
        lines: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
        self._listener = QueueListener(lines, self._file)
        self._logger = logging.Logger("conch.audit", logging.INFO)
        self._logger.addHandler(QueueHandler(lines))
        self._listener.start()
        self._open = True
        # The listener's thread is a daemon: the lines still queued are written at exit.
        atexit.register(self.close)

    def sampled(self) -> bool:
        """Whether the inference arriving now is one of the sample."""
        return random.random() < self.ratio

    def request_form(self, request: InferenceRequest) -> dict[str, Any]:
        """The request as the audit file holds it: V2 JSON's shape, redacted inputs as their hash."""
        form = self._message_form(request, "inputs", request.inputs)
        form["outputs"] = [output.name for output in request.outputs]
        return form

    def response_form(self, response: InferenceResponse) -> dict[str, Any]:
        """A response as the audit file holds it (outputs of redacted names as their hash)."""
        return self._message_form(response, "outputs", response.outputs)

    def _message_form(
        self, message: InferenceRequest | InferenceResponse, key: str, tensors: list[Tensor]
    ) -> dict[str, Any]:
        return {
            "id": message.id,
            "model_name": message.model_name,
            "model_version": message.model_version,
            "parameters": message.parameters,
            key: [self._tensor_form(tensor) for tensor in tensors],
        }

    def write(
        self, fields: dict[str, Any], request: dict[str, Any] | None, responses: list[dict[str, Any]]
    ) -> None:
        """One audit line: the inference's log fields, its request and its responses."""
        entry = {**fields, "request": request, "responses": responses}
        self._logger.info("inference audit", extra={"event": AUDIT_EVENT, "fields": entry})

    def decision(self, fields: dict[str, Any]) -> None:
        """One audit line for a release decision taken here (``fields``: the verdict's record)."""
        self._logger.info("release verdict", extra={"event": RELEASE_EVENT, "fields": fields})

    def close(self) -> None:
        """Write the lines still queued and close the file (again: nothing)."""
        if self._open:
            self._open = False
            self._listener.stop()
            self._file.close()

    def _tensor_form(self, tensor: Tensor) -> dict[str, Any]:
        form: dict[str, Any] = {"name": tensor.name, "datatype": tensor.datatype, "shape": list(tensor.shape)}
        if tensor.name in self.redact:
            form["redacted"] = True
            form["sha256"] = tensor_hash(tensor)
        else:
            form["data"] = _values(tensor)
        return form


def _values(tensor: Tensor) -> list[Any]:
    """The tensor's values in row-major order; BYTES as text, or ``{"base64": ...}`` when not UTF-8."""
    values = tensor.data.reshape(-1).tolist()
    if tensor.data.dtype != object:
        return list(values)
    return [_text(value) for value in values]


def _text(value: Any) -> Any:
    if isinstance(value, str):
        return value
    raw = bytes(value)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(raw).decode("ascii")}
