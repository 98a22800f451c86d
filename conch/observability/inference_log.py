"""One structured log record per inference: who asked (``request_id``), what for (``input_hash``),
what answered (``model``, ``model_version``, ``fallback_level``), how long it took and what it said.

The record is written by the ``conch.inference`` logger through the root handler, so
``--log-format json`` makes it one JSON line with each field a key of its own (docs/observability.md
lists them). It never holds an input: ``input_hash`` names the inputs, ``output_summary`` the answer.

How a record follows a request: a frontend :func:`begin`\\ s one when an inference arrives (with the
``x-request-id`` the client sent) and makes it the request's current record, a context variable of
the request's task. The layers between only report to it: :func:`note_request` once the request is
decoded (the V2 ``id``, the input hash, the trace id), :func:`note_response` for each response,
:func:`note_error` for a failure answered inside a stream. The frontend ends it with the answer's
status. Why a context variable: the decoded request and its response pass through code shared by
both protocols (``frontends/inference.py``) that has no business carrying a logging argument, and a
model's own calls (BLS, ensemble steps) go to the server directly, so they never touch the record
of the client request that caused them; their time is in its ``compute_ms``.

Why off by default (``--log-inferences``): Triton does not log each request either, and a record
costs the request path a hash, a dict and a formatted line (about 20 us in-process; in a server,
about 70 us of an HTTP inference's CPU and 120 us of a gRPC one's on the development machine;
docs/observability.md has the figures). The lines go out in batches (:mod:`batched_lines`). With
it off and no audit sample, nothing here runs: an HTTP answer only echoes the ``x-request-id`` the
client sent (``frontends/http/request_log.py``).
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Collection
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from conch.core.contract_enforcement import FILLED_PARAMETER
from conch.core.data_lineage import DATA_VERSION, INGESTION_TIMESTAMP
from conch.core.errors import ConchError
from conch.core.types import InferenceRequest, InferenceResponse
from conch.observability.batched_lines import BatchedLines
from conch.observability.input_hash import input_hash
from conch.observability.output_summary import output_summary

if TYPE_CHECKING:
    from conch.observability.audit_log import AuditLog

LOGGER = logging.getLogger("conch.inference")
#: The record's ``event``.
INFERENCE_EVENT = "inference"
#: The header (gRPC metadata key) a client names its request with, and the answer echoes.
REQUEST_ID_HEADER = "x-request-id"
#: The endpoints whose answer is a stream of responses: their records count them.
STREAM_ENDPOINTS = frozenset({"ModelStreamInfer", "generate_stream"})
#: The longest request id taken from a client; a longer one (or one with spaces or control
#: characters) is ignored and the next source is used, as Heroku's router does.
MAX_REQUEST_ID = 128


def usable_id(value: str | None) -> bool:
    """Whether a client's id can name the request: 1 to 128 visible ASCII characters."""
    return (
        value is not None
        and 0 < len(value) <= MAX_REQUEST_ID
        and value.isascii()
        and value.isprintable()
        and " " not in value
    )


def new_request_id() -> str:
    """A generated id: 32 random hex digits (uuid4's entropy, without its cost)."""
    return secrets.token_hex(16)


@dataclass(slots=True)
class InferenceRecord:
    """One inference on its way through the server; its fields become the log record.

    ``logged``: a record is written when it ends; ``audited``: the full request and responses go to
    the audit file (a record with neither is an inference the sample left out, with records off).
    """

    protocol: str
    endpoint: str
    model: str
    model_version: str
    #: The ``x-request-id`` the client sent, when usable.
    header_id: str | None
    journal: InferenceLog | None = None
    logged: bool = False
    audited: bool = False
    started_ns: int = field(default_factory=time.perf_counter_ns)
    #: The V2 request ``id``.
    v2_id: str = ""
    resolved_id: str = ""
    #: The W3C trace id while the request is traced (conch.observability.tracing); None otherwise.
    trace_id: str | None = None
    input_hash: str | None = None
    #: The request's ``data_version`` and ``ingestion_timestamp`` parameters, as sent (None: neither).
    lineage: dict[str, Any] | None = None
    #: The first response (a stream's others are counted in ``responses``).
    response: InferenceResponse | None = None
    responses: int = 0
    #: The failure a stream answered with an error message (its code is the record's status).
    failure: BaseException | None = None
    error: str | None = None
    audit_request: dict[str, Any] | None = None
    audit_responses: list[dict[str, Any]] = field(default_factory=list)

    @property
    def request_id(self) -> str:
        """``x-request-id``, else the V2 ``id``, else a generated one (fixed once asked)."""
        if not self.resolved_id:
            if self.header_id is not None:
                self.resolved_id = self.header_id
            elif usable_id(self.v2_id):
                self.resolved_id = self.v2_id
            else:
                self.resolved_id = new_request_id()
        return self.resolved_id


#: The text line of a record (the JSON line has every field besides).
_MESSAGE = "inference %s/%s %s %.3f ms request_id=%s"
_CURRENT: ContextVar[InferenceRecord | None] = ContextVar("conch_inference_record", default=None)


class InferenceLog:
    """The server's per-inference records (``--log-inferences``) and audit sample, one per process."""

    def __init__(self, records: bool, audit: AuditLog | None = None, redact: Collection[str] = ()) -> None:
        self.records = records
        self.audit = audit
        #: ``--log-redact``: tensors whose values no record or audit line holds.
        self.redact = frozenset(redact)
        if records:
            # The flag is the switch: records are written whatever --log-level says.
            LOGGER.setLevel(logging.INFO)
            _write_from_a_thread()

    def finish(self, record: InferenceRecord, status: int | str) -> None:
        """End ``record`` with the answer's ``status`` (HTTP status or gRPC code name)."""
        if not (record.logged or record.audited):
            return
        fields = record_fields(record, status)
        if record.logged:
            text = (fields["model"], fields["model_version"], status, fields["total_ms"], record.request_id)
            extra = {"event": INFERENCE_EVENT, "fields": fields}
            # makeRecord and handle, not info(): the caller's frame is of no use here, and finding it
            # costs the request path a walk up the stack.
            entry = LOGGER.makeRecord(LOGGER.name, logging.INFO, "", 0, _MESSAGE, text, None, extra=extra)
            LOGGER.handle(entry)
        if record.audited and self.audit is not None:
            self.audit.write(fields, record.audit_request, record.audit_responses)


def _write_from_a_thread() -> None:
    """Send the records through :class:`BatchedLines` to the root handlers (once per process)."""
    if not any(isinstance(handler, BatchedLines) for handler in LOGGER.handlers):
        LOGGER.addHandler(BatchedLines(list(logging.getLogger().handlers)))
        LOGGER.propagate = False


def begin(
    journal: InferenceLog | None, protocol: str, endpoint: str, model: str, version: str, header: str | None
) -> InferenceRecord:
    """A record for an inference that has just arrived, made the current one of its task."""
    record = InferenceRecord(protocol, endpoint, model, version, header if usable_id(header) else None)
    if journal is not None:
        record.journal = journal
        record.logged = journal.records
        record.audited = journal.audit is not None and journal.audit.sampled()
    _CURRENT.set(record)
    return record


def note_request(request: InferenceRequest) -> None:
    """The current inference's decoded request: its id, input hash and trace (and body, if audited)."""
    record = _CURRENT.get()
    if record is None:
        return
    record.v2_id = request.id
    if record.logged:
        record.input_hash = input_hash(request.inputs)
        trace = getattr(request, "trace", None)
        record.trace_id = None if trace is None else trace.trace_id
        parameters = request.parameters
        if parameters and (DATA_VERSION in parameters or INGESTION_TIMESTAMP in parameters):
            record.lineage = {
                key: parameters[key] for key in (DATA_VERSION, INGESTION_TIMESTAMP) if key in parameters
            }
    if record.audited and record.journal is not None and record.journal.audit is not None:
        record.audit_request = record.journal.audit.request_form(request)


def note_response(response: InferenceResponse | ConchError) -> None:
    """A response of the current inference (a stream notes each; an error it sent is noted as one)."""
    record = _CURRENT.get()
    if record is None:
        return
    if isinstance(response, ConchError):
        note_error(response)
        return
    record.responses += 1
    if record.response is None:
        record.response = response
    if record.audited and record.journal is not None and record.journal.audit is not None:
        record.audit_responses.append(record.journal.audit.response_form(response))


def note_error(exc: BaseException) -> None:
    """A failure of the current inference that its status alone does not tell (one inside a stream)."""
    record = _CURRENT.get()
    if record is not None and record.failure is None:
        record.failure = exc
        record.error = exc.message if isinstance(exc, ConchError) else "internal server error"


def record_fields(record: InferenceRecord, status: int | str) -> dict[str, Any]:
    """The JSON fields of ``record`` ended with ``status``."""
    response = record.response
    total_ms = (time.perf_counter_ns() - record.started_ns) / 1e6
    fields: dict[str, Any] = {
        "request_id": record.request_id,
        "trace_id": record.trace_id,
        "protocol": record.protocol,
        "endpoint": record.endpoint,
        "model": record.model,
        "model_version": response.model_version if response is not None else record.model_version,
        "input_hash": record.input_hash,
        "queue_ms": None if response is None else round(response.queue_ns / 1e6, 3),
        "compute_ms": None if response is None else round(response.compute_ns / 1e6, 3),
        "total_ms": round(total_ms, 3),
        "status": status,
    }
    if response is not None and "fallback_level" in response.parameters:
        fields["fallback_level"] = response.parameters["fallback_level"]
    if record.lineage is not None:
        fields.update(record.lineage)
    if response is not None and FILLED_PARAMETER in response.parameters:
        fields[FILLED_PARAMETER] = response.parameters[FILLED_PARAMETER]
    redact = record.journal.redact if record.journal is not None else ()
    fields["output_summary"] = None if response is None else output_summary(response, redact)
    if record.endpoint in STREAM_ENDPOINTS:
        fields["responses"] = record.responses
    if record.error is not None:
        fields["error"] = record.error
    return fields


@dataclass(frozen=True)
class RequestLogSettings:
    """``--log-inferences``, ``--log-sample-bodies``, ``--log-redact``, ``--audit-log``,
    ``--audit-log-max-mb`` and ``--access-log`` (all off by default)."""

    inferences: bool = False
    sample_bodies: float = 0.0
    redact: tuple[str, ...] = ()
    audit_path: str = ""
    audit_max_mb: int = 100
    access_log: bool = False


def open_inference_log(settings: RequestLogSettings) -> InferenceLog | None:
    """The process's inference log; None when neither records nor an audit sample are asked for.

    Raises ValueError, saying why, when the audit file cannot be opened.
    """
    if not settings.inferences and settings.sample_bodies <= 0:
        return None
    audit = open_audit_log(settings) if settings.sample_bodies > 0 else None
    return InferenceLog(settings.inferences, audit, settings.redact)


def open_audit_log(settings: RequestLogSettings) -> AuditLog:
    """``--audit-log``, drawing ``--log-sample-bodies`` of the inferences (none at 0: release decisions
    only). Raises ValueError, saying why, when the file cannot be opened."""
    from conch.observability.audit_log import AuditLog

    max_bytes = settings.audit_max_mb * 1024 * 1024
    try:
        return AuditLog(settings.audit_path, settings.sample_bodies, settings.redact, max_bytes)
    except OSError as exc:
        raise ValueError(f"cannot open --audit-log {settings.audit_path}: {exc.strerror}") from None
