"""``conch_requests_total{protocol,code}`` and ``conch_rate_limited_total{model,client_class}``.

The frontends and the gateway count in plain ``Counter`` objects (one dictionary increment per
answer); these collectors turn them into families at scrape time. ``client_class`` is how the client
was known (``jwt``, ``header`` or ``address``), never the client's id: ids are unbounded and personal.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector


@dataclass
class AnswerCodes:
    """Every answer of the server, by HTTP status and by gRPC code."""

    http: Counter[int] = field(default_factory=Counter)
    grpc: Counter[str] = field(default_factory=Counter)


class RequestCodesCollector(Collector):
    def __init__(self, codes: AnswerCodes) -> None:
        self._codes = codes

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "conch_requests",
            "Answers the server gave, by protocol and HTTP status or gRPC code",
            labels=["protocol", "code"],
        )
        for status, count in sorted(self._codes.http.items()):
            family.add_metric(["http", str(status)], count)
        for code, count in sorted(self._codes.grpc.items()):
            family.add_metric(["grpc", code], count)
        yield family


class RateLimitedCollector(Collector):
    def __init__(self, counts: Counter[tuple[str, str]]) -> None:
        self._counts = counts

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "conch_rate_limited",
            "Requests refused by a client's rate limit, by model and client class",
            labels=["model", "client_class"],
        )
        for labels, count in sorted(self._counts.items()):
            family.add_metric(list(labels), count)
        yield family
