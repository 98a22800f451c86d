"""An OTLP/HTTP traces receiver on loopback: what a collector does with conch's spans, decoded with
``opentelemetry-proto`` so a test reads span trees instead of bytes.

It accepts ``POST /v1/traces`` with an ``ExportTraceServiceRequest`` (protobuf, optionally gzipped, as
the OTLP/HTTP exporter sends it) and keeps every span.
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as the receiver got it; ids as hex, as a ``traceparent`` writes them."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str
    kind: int
    attributes: dict[str, Any]
    links: list[tuple[str, str]]
    service: str
    status_code: int
    start_ns: int
    end_ns: int


def _value(any_value: Any) -> Any:
    which = any_value.WhichOneof("value")
    return getattr(any_value, which) if which else None


def _spans(export: ExportTraceServiceRequest) -> list[ReceivedSpan]:
    spans = []
    for resource_spans in export.resource_spans:
        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    ReceivedSpan(
                        name=span.name,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_id=span.parent_span_id.hex(),
                        kind=span.kind,
                        attributes={a.key: _value(a.value) for a in span.attributes},
                        links=[(link.trace_id.hex(), link.span_id.hex()) for link in span.links],
                        service=str(resource.get("service.name", "")),
                        status_code=span.status.code,
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                    )
                )
    return spans


@dataclass
class OtlpReceiver:
    """``with OtlpReceiver() as receiver:`` serves on ``receiver.url`` until the block ends."""

    spans: list[ReceivedSpan] = field(default_factory=list)
    #: Every export's headers (OTEL_EXPORTER_OTLP_HEADERS arrive here).
    headers: list[dict[str, str]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1/traces"

    def __enter__(self) -> OtlpReceiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                if self.path != "/v1/traces":
                    self.send_error(404)
                    return
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                export = ExportTraceServiceRequest.FromString(body)
                with receiver._lock:
                    receiver.spans.extend(_spans(export))
                    receiver.headers.append({k.lower(): v for k, v in self.headers.items()})
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()

    def received(self) -> list[ReceivedSpan]:
        """Every span received so far."""
        with self._lock:
            return list(self.spans)

    def trace(self, trace_id: str) -> list[ReceivedSpan]:
        with self._lock:
            return [span for span in self.spans if span.trace_id == trace_id]

    def wait_for(
        self, done: Callable[[list[ReceivedSpan]], bool], timeout: float = 30.0
    ) -> list[ReceivedSpan]:
        """Every span received once ``done`` holds for them; fails after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                spans = list(self.spans)
            if done(spans):
                return spans
            if time.monotonic() > deadline:
                raise AssertionError(f"spans never matched in {timeout}s; got {[s.name for s in spans]}")
            time.sleep(0.05)
