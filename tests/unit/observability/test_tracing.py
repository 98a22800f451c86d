"""Tracing's rules without a server: when it is on, where spans go, the trace flags, and the spans an
execution makes (recorded by the SDK's in-memory exporter)."""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from conch.cli.main import build_parser
from conch.cli.trace_flags import endpoint, sample_ratio
from conch.core.errors import InvalidArgumentError, UnavailableError
from conch.observability import tracing
from conch.observability.tracing import RequestTrace, TraceSettings, enabled, traces_url

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Tracing on for the test, its spans kept in memory; off again after it."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.tracer = provider.get_tracer("test")
    yield exporter
    tracing.tracer = None
    provider.shutdown()


@dataclass
class Scheduled:
    """What start_execution reads of a ScheduledRequest."""

    trace: RequestTrace | None
    queue_ns: int
    rows: int = 1


def _request(name: str = "request") -> RequestTrace:
    assert tracing.tracer is not None
    return RequestTrace(tracing.tracer.start_span(name, kind=SpanKind.SERVER))


def test_tracing_is_off_unless_an_endpoint_is_named() -> None:
    assert tracing.tracer is None  # nothing turned it on: the request path checks this one attribute
    assert not enabled(TraceSettings(), {})
    assert enabled(TraceSettings(endpoint="http://collector:4318"), {})
    assert enabled(TraceSettings(), {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert enabled(TraceSettings(), {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"})
    named = TraceSettings(endpoint="http://collector:4318")
    assert not enabled(named, {"OTEL_SDK_DISABLED": "true"})
    assert not enabled(named, {"OTEL_TRACES_EXPORTER": "none"})
    assert not tracing.start(TraceSettings(), {})


def test_a_bare_endpoint_gets_the_traces_path() -> None:
    assert traces_url("http://collector:4318") == "http://collector:4318/v1/traces"
    assert traces_url("http://collector:4318/") == "http://collector:4318/v1/traces"
    assert traces_url("https://otlp.example/custom/traces") == "https://otlp.example/custom/traces"


def test_trace_flags_and_their_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    args = build_parser().parse_args(["serve", "--trace-sample-ratio", "0.25"])
    assert (args.trace_otlp_endpoint, args.trace_sample_ratio) == ("", 0.25)
    monkeypatch.setenv("CONCH_TRACE_OTLP_ENDPOINT", "http://collector:4318")
    monkeypatch.setenv("CONCH_TRACE_SAMPLE_RATIO", "0")
    args = build_parser().parse_args(["serve"])
    assert (args.trace_otlp_endpoint, args.trace_sample_ratio) == ("http://collector:4318", 0.0)
    assert sample_ratio("") is None  # the OTEL_TRACES_SAMPLER variables decide
    for bad in ("1.5", "-0.1", "half"):
        with pytest.raises(argparse.ArgumentTypeError):
            sample_ratio(bad)
    with pytest.raises(argparse.ArgumentTypeError, match="http://localhost:4318/v1/traces"):
        endpoint("collector:4318")


def test_an_untraced_batch_makes_no_span(spans: InMemorySpanExporter) -> None:
    assert (
        tracing.start_execution([Scheduled(None, 100), Scheduled(None, 200)], time.perf_counter_ns()) is None
    )
    assert spans.get_finished_spans() == ()


def test_a_batch_links_to_its_requests_and_each_queue_span_starts_when_it_was_queued(
    spans: InMemorySpanExporter,
) -> None:
    first, second = _request("first"), _request("second")
    requests = [Scheduled(first, 5_000_000, rows=2), Scheduled(None, 1_000), Scheduled(second, 1_000_000)]
    dispatched = time.perf_counter_ns()
    before = time.time_ns()
    execution = tracing.start_execution(requests, dispatched)
    assert execution is not None
    execution.end()
    finished = {(s.name, s.parent.span_id if s.parent else None): s for s in spans.get_finished_spans()}
    first_id, second_id = first.span.get_span_context().span_id, second.span.get_span_context().span_id
    first_queue, second_queue = finished["queue", first_id], finished["queue", second_id]
    assert second_queue.end_time == first_queue.end_time  # both left the queue with the batch
    assert first_queue.end_time is not None and first_queue.start_time is not None
    assert first_queue.end_time - first_queue.start_time == 5_000_000  # queued 5 ms before dispatch
    assert abs(first_queue.end_time - before) < 50_000_000  # placed on the wall clock
    batch = finished["batch", first_id]  # in the first traced request's trace
    assert [link.context.span_id for link in batch.links] == [first_id, second_id]
    assert batch.attributes == {"conch.batch.requests": 3, "conch.batch.rows": 4}
    for request_id in (first_id, second_id):
        execute = finished["execute", request_id]
        assert [link.context.span_id for link in execute.links] == [batch.context.span_id]
    assert tracing.execution_of(requests) is first.execution is second.execution
    assert first.execution is not None


def test_a_request_span_records_its_stages_and_status(spans: InMemorySpanExporter) -> None:
    request = _request()
    request.begin("decode")
    request.end_stage()
    request.begin("encode")
    request.finish({"http.response.status_code": 503}, "no instance")  # closes the open stage too
    by_name = {s.name: s for s in spans.get_finished_spans()}
    assert set(by_name) == {"decode", "encode", "request"}
    request_id = request.span.get_span_context().span_id
    assert all(
        by_name[n].parent is not None and by_name[n].parent.span_id == request_id
        for n in ("decode", "encode")
    )
    assert by_name["request"].attributes == {"http.response.status_code": 503}
    assert by_name["request"].status.description == "no instance"
    assert (
        len(request.trace_id) == 32 and int(request.trace_id, 16) == request.span.get_span_context().trace_id
    )


def test_an_http_request_continues_the_callers_traceparent(spans: InMemorySpanExporter) -> None:
    scope = {
        "path": "/v2/models/m/infer",
        "headers": [(b"traceparent", f"00-{TRACE_ID}-{PARENT_ID}-01".encode()), (b"x-other", b"1")],
    }

    async def refuse(trace: RequestTrace | None) -> tuple[int, bytes]:
        assert trace is not None
        raise InvalidArgumentError("bad input")

    with pytest.raises(InvalidArgumentError):
        asyncio.run(tracing.http_request(scope, "m", "", refuse))
    (server,) = spans.get_finished_spans()
    assert format(server.context.trace_id, "032x") == TRACE_ID
    assert server.parent is not None and format(server.parent.span_id, "016x") == PARENT_ID
    assert server.attributes is not None and server.attributes["http.response.status_code"] == 400
    assert server.status.is_unset  # a client's mistake is not the server's error


def test_an_unsampled_caller_leaves_the_request_untraced(spans: InMemorySpanExporter) -> None:
    seen: list[RequestTrace | None] = []

    async def answer(trace: RequestTrace | None) -> int:
        seen.append(trace)
        raise UnavailableError("drop")

    with pytest.raises(UnavailableError):
        asyncio.run(
            tracing.grpc_request(
                [("traceparent", f"00-{TRACE_ID}-{PARENT_ID}-00")], "m", "", lambda e: 14, answer
            )
        )
    assert seen == [None]
    assert spans.get_finished_spans() == ()
