"""OpenTelemetry traces of inference requests: where a request's time went, span by span.

A traced request is one server span (HTTP ``POST .../infer`` or gRPC ``ModelInfer``, continuing the
caller's W3C ``traceparent``) with a child per stage: ``decode``, ``queue``, ``execute`` and
``encode``. A batch is one ``batch`` span, linked to every traced request in it; a Python model's BLS
calls and a release's shadow copies are spans of the trace that caused them (see
docs/observability.md).

Why the module-level :data:`tracer`: with tracing off (the default) it is None, and each stage of
the request path pays one ``is None`` check: no span object, no context attached. A request the
sampler leaves out carries no :class:`RequestTrace` either, so its stages pay the same one check.
Spans leave through a ``BatchSpanProcessor``, on its own thread, never on the request path.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from conch.core.errors import ConchError
from conch.core.version import VERSION
from conch.observability.trace_settings import MODEL_ATTRIBUTE, LiveTraceSettings

#: The tracer of this process while tracing is on (:func:`start`); None while it is off.
tracer: Tracer | None = None
#: Which requests may start a trace, as the trace settings API sets it (Triton's trace extension).
live_settings = LiveTraceSettings(exporting=False)
_provider: Any = None
_PROPAGATOR = TraceContextTextMapPropagator()
#: The headers (gRPC metadata keys) the W3C propagator reads.
_CONTEXT_KEYS = tuple(_PROPAGATOR.fields)
_CONTEXT_KEYS_BYTES = tuple(key.encode() for key in _CONTEXT_KEYS)
GRPC_SERVICE = "inference.GRPCInferenceService"

R = TypeVar("R")


@dataclass(frozen=True)
class TraceSettings:
    """``--trace-otlp-endpoint`` and ``--trace-sample-ratio``; the ``OTEL_*`` variables fill in the rest.

    ``endpoint`` is the full OTLP/HTTP traces URL (``http://collector:4318/v1/traces``); a bare
    ``http://collector:4318`` gets ``/v1/traces``. ``sample_ratio`` None leaves the sampler to
    ``OTEL_TRACES_SAMPLER`` (default: every trace the caller did not mark unsampled).
    """

    endpoint: str = ""
    sample_ratio: float | None = None


def enabled(settings: TraceSettings, environ: Mapping[str, str]) -> bool:
    """Whether this server exports traces: a flag or an ``OTEL_EXPORTER_OTLP_*ENDPOINT`` says so, and
    neither ``OTEL_SDK_DISABLED=true`` nor ``OTEL_TRACES_EXPORTER=none`` says otherwise."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return bool(
        settings.endpoint
        or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    )


def traces_url(endpoint: str) -> str:
    """The URL spans are posted to: ``endpoint`` as given, with ``/v1/traces`` when it has no path."""
    _, _, rest = endpoint.partition("://")
    if not rest or "/" not in rest.rstrip("/"):
        return endpoint.rstrip("/") + "/v1/traces"
    return endpoint


def start(trace_settings: TraceSettings, environ: Mapping[str, str]) -> bool:
    """Turn tracing on for this process when :func:`enabled`; returns whether it did.

    The SDK is imported only here, so a server without tracing never loads it.
    """
    global tracer, _provider, live_settings
    if not enabled(trace_settings, environ):
        return False
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    from conch.observability.trace_sampler import SettingsSampler

    resource = Resource.create(
        {"service.version": VERSION}
        if environ.get("OTEL_SERVICE_NAME")
        else {SERVICE_NAME: "conch", "service.version": VERSION}
    )
    ratio = trace_settings.sample_ratio
    _provider = TracerProvider(
        resource=resource, sampler=None if ratio is None else ParentBased(TraceIdRatioBased(ratio))
    )
    live_settings = LiveTraceSettings(exporting=True)
    # The provider resolved the configured sampler (the flag's, or OTEL_TRACES_SAMPLER's); the
    # trace settings go before it. Its tracers read the attribute when made, below.
    _provider.sampler = SettingsSampler(live_settings, _provider.sampler)
    endpoint = trace_settings.endpoint
    exporter = OTLPSpanExporter(endpoint=traces_url(endpoint) if endpoint else None)
    _provider.add_span_processor(BatchSpanProcessor(exporter))
    tracer = _provider.get_tracer("conch", VERSION)
    return True


def stop() -> None:
    """Export the spans still buffered and turn tracing off (the server's exit path)."""
    global tracer, _provider, live_settings
    provider, _provider, tracer = _provider, None, None
    live_settings = LiveTraceSettings(exporting=False)
    if provider is not None:
        provider.shutdown()


class RequestTrace:
    """One traced request: its span, the context its stages hang from, the stage open now, and the
    ``batch`` span of the execution running it (the parent of a Python model's BLS calls)."""

    __slots__ = ("context", "execution", "span", "stage")

    def __init__(self, span: Span) -> None:
        self.span = span
        self.context = trace.set_span_in_context(span)
        self.stage: Span | None = None
        self.execution: Context | None = None

    @property
    def trace_id(self) -> str:
        """The W3C trace id, 32 hex digits (for log records)."""
        return format(self.span.get_span_context().trace_id, "032x")

    def begin(self, stage: str) -> None:
        """Close the stage open now, if any, and open ``stage`` (``decode``, ``encode``)."""
        self.end_stage()
        assert tracer is not None
        self.stage = tracer.start_span(stage, context=self.context)

    def end_stage(self) -> None:
        if self.stage is not None:
            self.stage.end()
            self.stage = None

    def child(self, name: str, attributes: Mapping[str, Any]) -> RequestTrace:
        """A request made on this one's behalf (a shadow copy, an ensemble step): a span under it."""
        assert tracer is not None
        return RequestTrace(tracer.start_span(name, context=self.context, attributes=attributes))

    def finished(self, _task: object = None) -> None:
        """:meth:`finish` with nothing to add, as a task's done callback (a shadow copy)."""
        self.finish({})

    def finish(self, attributes: Mapping[str, Any], error: str | None = None) -> None:
        """End the open stage and the request's span, with the answer's attributes."""
        self.end_stage()
        self.span.set_attributes(attributes)
        if error is not None:
            self.span.set_status(Status(StatusCode.ERROR, error))
        self.span.end()


def _server_request(
    name: str, carrier: dict[str, str], kind: SpanKind, attributes: dict[str, Any]
) -> RequestTrace | None:
    """The server span of a request, continuing the caller's trace; None when left unsampled."""
    assert tracer is not None
    span = tracer.start_span(name, context=_PROPAGATOR.extract(carrier), kind=kind, attributes=attributes)
    return RequestTrace(span) if span.is_recording() else None


def _model_attributes(protocol: str, model: str, version: str) -> dict[str, Any]:
    return {"conch.protocol": protocol, MODEL_ATTRIBUTE: model, "conch.model.version": version}


async def http_request(
    scope: Mapping[str, Any],
    model: str,
    version: str,
    answer: Callable[[RequestTrace | None], Awaitable[R]],
) -> R:
    """``answer`` an HTTP inference request inside its server span; the reply is (status, ...)."""
    carrier = {
        key.decode(): bytes(value).decode("latin-1")
        for key, value in scope["headers"]
        if key in _CONTEXT_KEYS_BYTES
    }
    route = "/v2/models/{model_name}" + ("/versions/{model_version}" if version else "") + "/infer"
    attributes = _model_attributes("http", model, version)
    attributes.update({"http.request.method": "POST", "http.route": route, "url.path": scope["path"]})
    attributes["url.scheme"] = scope.get("scheme", "http")
    request = _server_request(f"POST {route}", carrier, SpanKind.SERVER, attributes)
    if request is None:
        return await answer(None)
    try:
        reply = await answer(request)
    except ConchError as exc:
        status = exc.kind.http_status
        request.finish({"http.response.status_code": status}, exc.message if status >= 500 else None)
        raise
    except BaseException as exc:
        request.finish({"http.response.status_code": 500}, type(exc).__name__)
        raise
    request.finish({"http.response.status_code": reply[0]})  # type: ignore[index]
    return reply


async def grpc_request(
    metadata: Iterable[tuple[str, Any]] | None,
    model: str,
    version: str,
    code_of: Callable[[ConchError], int],
    answer: Callable[[RequestTrace | None], Awaitable[R]],
    method: str = "ModelInfer",
) -> R:
    """``answer`` a gRPC inference inside its server span: a ModelInfer call, or one request of a
    ModelStreamInfer stream (the stream's metadata is each request's); ``code_of`` gives an error's
    code."""
    carrier = {key: str(value) for key, value in metadata or () if key in _CONTEXT_KEYS}
    attributes = _model_attributes("grpc", model, version)
    attributes.update({"rpc.system": "grpc", "rpc.service": GRPC_SERVICE, "rpc.method": method})
    request = _server_request(f"{GRPC_SERVICE}/{method}", carrier, SpanKind.SERVER, attributes)
    if request is None:
        return await answer(None)
    try:
        reply = await answer(request)
    except ConchError as exc:
        failed = exc.kind.http_status >= 500
        request.finish({"rpc.grpc.status_code": code_of(exc)}, exc.message if failed else None)
        raise
    except BaseException as exc:
        request.finish({"rpc.grpc.status_code": 13}, type(exc).__name__)  # INTERNAL
        raise
    request.finish({"rpc.grpc.status_code": 0})
    return reply


def bls_request(parent: Context, model: str, version: str) -> RequestTrace:
    """A Python model's BLS call, a span under the execution that made it."""
    attributes = _model_attributes("bls", model, version)
    assert tracer is not None
    return RequestTrace(
        tracer.start_span(f"BLS {model}", context=parent, kind=SpanKind.CLIENT, attributes=attributes)
    )


class Queued(Protocol):
    """What :func:`start_execution` reads of a scheduled request."""

    trace: RequestTrace | None
    queue_ns: int
    rows: int


class Execution:
    """The spans of one execution: the ``batch`` span and each traced request's ``execute`` span."""

    __slots__ = ("batch", "executes")

    def __init__(self, batch: Span, executes: list[Span]) -> None:
        self.batch = batch
        self.executes = executes

    def end(self) -> None:
        for span in self.executes:
            span.end()
        self.batch.end()


def start_execution(requests: Sequence[Queued], dispatched_ns: int) -> Execution | None:
    """Spans for a batch sent to an instance at ``dispatched_ns`` (``time.perf_counter_ns``); None
    when no request in it is traced.

    Each traced request gets its ``queue`` span (from when it was queued, ``queue_ns`` before), and
    an ``execute`` span linked to the ``batch`` span. The batch span is a child of the first traced
    request and links to every traced request, as OpenTelemetry's messaging conventions describe a
    batch made of many traces; a BLS call the model makes runs under it.
    """
    traced = [r for r in requests if r.trace is not None]
    if not traced or tracer is None:
        return None
    dispatched = time.time_ns() - time.perf_counter_ns() + dispatched_ns
    for request in traced:
        assert request.trace is not None
        tracer.start_span(
            "queue", context=request.trace.context, start_time=dispatched - request.queue_ns
        ).end(end_time=dispatched)
    first = traced[0].trace
    assert first is not None
    batch = tracer.start_span(
        "batch",
        context=first.context,
        links=[Link(r.trace.span.get_span_context()) for r in traced if r.trace is not None],
        attributes={"conch.batch.requests": len(requests), "conch.batch.rows": sum(r.rows for r in requests)},
        start_time=dispatched,
    )
    execution = trace.set_span_in_context(batch)
    batch_link = [Link(batch.get_span_context())]
    executes = []
    for request in traced:
        assert request.trace is not None
        request.trace.execution = execution
        executes.append(
            tracer.start_span(
                "execute", context=request.trace.context, links=batch_link, start_time=dispatched
            )
        )
    return Execution(batch, executes)


def execution_of(requests: Iterable[Any]) -> Context | None:
    """The batch span's context of an execution running ``requests`` (None: none traced)."""
    for request in requests:
        if request.trace is not None:
            context: Context | None = request.trace.execution
            return context
    return None
