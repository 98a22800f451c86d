"""The ``/metrics`` page in Prometheus's text format 0.0.4, with Triton's counters typed under bare names.

Triton writes ``# TYPE nv_inference_request_success counter`` above samples of that same name, and
dashboards query those names. prometheus_client cannot write that: its text writer renames every
counter to ``<name>_total``, and OpenMetrics requires the suffix. So this module writes those counter
families itself (a HELP line, a TYPE line and one line per sample) and hands every other family
(gauges, histograms, the process collector's figures) to prometheus_client's own writer.

It answers every scrape in 0.0.4 whatever the ``Accept`` header asks: a Prometheus offers
OpenMetrics first, and answering in it would force the ``_total`` names Triton does not have.
"""

from __future__ import annotations

import gzip
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest, gzip_accepted
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class TritonCounter(Metric):
    """A cumulative count typed ``counter`` under Triton's bare name; only :func:`render` writes it.

    Handed to prometheus_client's writer instead, it would come out as ``# TYPE <name>_total``
    above samples still called ``<name>``.
    """

    def __init__(self, name: str, documentation: str, labels: list[str]) -> None:
        super().__init__(name, documentation, "counter")
        self._label_names = labels

    def add_metric(self, labels: list[str], value: float) -> None:
        self.add_sample(self.name, dict(zip(self._label_names, labels, strict=True)), value)


def render(registry: Collector) -> bytes:
    """One scrape of ``registry`` in the text format 0.0.4, each collector asked once."""
    return b"".join(
        _counter_text(family) if isinstance(family, TritonCounter) else generate_latest(_Single(family))
        for family in registry.collect()
    )


def metrics_app(registry: Collector) -> ASGIApp:
    """An ASGI app answering every HTTP request with :func:`render`, gzipped when the client accepts it."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        encodings = b",".join(value for name, value in scope["headers"] if name.lower() == b"accept-encoding")
        body = render(registry)
        reply = [(b"content-type", CONTENT_TYPE.encode())]
        if gzip_accepted(encodings.decode("latin-1")):
            body = gzip.compress(body)
            reply.append((b"content-encoding", b"gzip"))
        await send({"type": "http.response.start", "status": 200, "headers": reply})
        await send({"type": "http.response.body", "body": body})

    return app


class _Single(Collector):
    """One already collected family, in the shape prometheus_client's writer takes."""

    def __init__(self, family: Metric) -> None:
        self._family = family

    def collect(self) -> Iterator[Metric]:
        yield self._family


def _counter_text(family: TritonCounter) -> bytes:
    lines = [
        f"# HELP {family.name} {_escape_help(family.documentation)}",
        f"# TYPE {family.name} counter",
        *(f"{s.name}{_label_text(s.labels)} {floatToGoString(s.value)}" for s in family.samples),
    ]
    return "".join(f"{line}\n" for line in lines).encode()


def _label_text(labels: dict[str, str]) -> str:
    """``{name="value",...}`` in name order, as prometheus_client writes its own samples."""
    if not labels:
        return ""
    return "{" + ",".join(f'{name}="{_escape_label_value(labels[name])}"' for name in sorted(labels)) + "}"


def _escape_help(text: str) -> str:
    """HELP text escapes only a backslash and a line feed."""
    return text.replace("\\", r"\\").replace("\n", r"\n")


def _escape_label_value(value: str) -> str:
    """The text format's three escapes: a backslash, a double quote and a line feed."""
    return value.replace("\\", r"\\").replace('"', r"\"").replace("\n", r"\n")
