"""The Markdown report: throughput table, latency, ratios to the peers and to the raw ONNX Runtime limit.

Rows are (server, protocol), columns (model, concurrency). Ratios compare cells of one run only: absolute
figures drift between machines and between runs, ratios measured side by side much less. With several
rounds, each conch/peer ratio is the median of the per-round ratios (conch and the peer measured in the
same round, minutes apart at most), shown with the lowest and highest of them: a slow spell on the
shared cores then moves one round's ratio, not the median.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from bench.loadgen import LoadResult
from bench.ort_limit import OrtLimit

CONCURRENCIES = (1, 32)
PROTOCOLS = {"http": "HTTP JSON, wrk", "grpc": "gRPC, perf_analyzer", "http_pa": "HTTP, perf_analyzer"}
BATCHED = 32
MISSING = "-"
OVERHEAD_NOTE = (
    "p50 at c=1 minus the model's compute: per request as the server reports it (`compute_infer` from "
    "`/v2/models/MODEL/stats`, read before and after the point; for Triton's python backend it includes "
    "the stub round trip), and as raw ONNX Runtime measures one batch-1 call (the same for every server). "
    "The server's request time (`success` in the same statistics) splits that overhead: what is outside "
    "it (p50 minus the request time) is the client, the loopback and the server's HTTP or gRPC library "
    "before and after the server's own timing. The server's figures are means, p50 a median: a small "
    "negative overhead is noise.\n\n"
)


@dataclass(frozen=True)
class Point:
    """One cell: the load result and the server's own compute time per request meanwhile (if it says)."""

    load: LoadResult
    compute_ms: float | None = None
    #: The server's whole time per request (V2 ``success`` statistics), where it says.
    request_ms: float | None = None
    #: CPU microseconds per request of the server's process and of its children (model processes).
    server_cpu_us: float | None = None
    children_cpu_us: float | None = None


@dataclass
class Row:
    """One (server, protocol) line; ``note`` replaces every cell (e.g. "not installable: ...")."""

    peer: str
    server: str
    protocol: str
    cells: dict[tuple[str, int], Point] = field(default_factory=dict)
    note: str | None = None
    #: Every round's point by round number; ``cells`` holds the one with the median throughput.
    rounds: dict[tuple[str, int], dict[int, Point]] = field(default_factory=dict)

    def add(self, key: tuple[str, int], point: Point, round_number: int | None = None) -> None:
        """Record the point of round ``round_number`` (default: the round after the last recorded); the
        cell shown is the round with the median throughput, so its latencies and compute time come from
        the same run as its rate."""
        points = self.rounds.setdefault(key, {})
        points[len(points) + 1 if round_number is None else round_number] = point
        ranked = sorted(points.values(), key=lambda p: p.load.throughput if p.load.ok else -1.0)
        self.cells[key] = ranked[len(ranked) // 2]

    def spread(self, key: tuple[str, int]) -> tuple[float, float] | None:
        """Lowest and highest throughput over the rounds that succeeded (None with fewer than two)."""
        rates = [p.load.throughput for p in self.rounds.get(key, {}).values() if p.load.ok]
        return (min(rates), max(rates)) if len(rates) > 1 else None

    def round_throughputs(self, key: tuple[str, int]) -> dict[int, float]:
        """Throughput by round number, for the rounds that succeeded."""
        return self.round_values(key, "throughput")

    def round_values(self, key: tuple[str, int], metric: str) -> dict[int, float]:
        """``metric`` (a :class:`LoadResult` field: ``throughput``, ``p50_ms``...) by round number, for
        the rounds that succeeded."""
        return {n: getattr(p.load, metric) for n, p in self.rounds.get(key, {}).items() if p.load.ok}

    def throughput(self, model: str, concurrency: int) -> float | None:
        point = self.cells.get((model, concurrency))
        return point.load.throughput if point is not None and point.load.ok else None


@dataclass(frozen=True)
class PairedRatio:
    """``ours / peer`` for one cell: the median of the per-round ratios and their lowest and highest."""

    median: float
    low: float
    high: float
    rounds: int


def paired_ratio(
    ours: Row,
    peer: Row,
    key: tuple[str, int],
    peer_key: tuple[str, int] | None = None,
    metric: str = "throughput",
) -> PairedRatio | None:
    """The ratio of two rows' ``metric`` round by round (only rounds where both succeeded), or None;
    ``peer_key`` compares our ``key`` cell with another of the peer's (default the same)."""
    ratios = list(round_ratios(ours, peer, key, peer_key, metric).values())
    if not ratios:
        return None
    return PairedRatio(statistics.median(ratios), min(ratios), max(ratios), len(ratios))


def round_ratios(
    ours: Row,
    peer: Row,
    key: tuple[str, int],
    peer_key: tuple[str, int] | None = None,
    metric: str = "throughput",
) -> dict[int, float]:
    """Our ``metric`` over the peer's, by round number, for the rounds where both succeeded."""
    theirs = peer.round_values(key if peer_key is None else peer_key, metric)
    return {
        n: value / theirs[n]
        for n, value in sorted(ours.round_values(key, metric).items())
        if theirs.get(n, 0.0) > 0
    }


def _paired_cell(ours: Row, peer: Row, key: tuple[str, int]) -> str:
    ratio = paired_ratio(ours, peer, key)
    if ratio is None:
        return MISSING
    if ratio.rounds == 1:
        return f"{ratio.median:.2f}x"
    return f"{ratio.median:.2f}x [{ratio.low:.2f}-{ratio.high:.2f}]"


@dataclass
class BenchResults:
    """Everything one run measured, in the order it was measured."""

    started: str
    machine: list[str]
    method: list[str]
    models: list[str]
    ort: dict[str, dict[int, OrtLimit]] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)

    def row(self, peer: str, protocol: str) -> Row | None:
        return next((row for row in self.rows if row.peer == peer and row.protocol == protocol), None)


def render(results: BenchResults) -> str:
    """The whole report as Markdown."""
    sections = [
        f"# conch benchmark, {results.started}",
        "## Machine and versions\n\n" + bullets(results.machine),
        "## How\n\n" + bullets(results.method),
        "## Throughput, inferences per second (batch 1 per request)\n\n" + throughput_table(results),
        "## Latency p50 / p99, milliseconds\n\n" + latency_table(results),
        "## Ratios\n\n" + ratio_table(results),
        f"## Share of the raw batched ONNX Runtime limit, mlp c={BATCHED}\n\n" + limit_table(results),
        "## Server overhead at c=1\n\n" + OVERHEAD_NOTE + overhead_table(results),
    ]
    return "\n\n".join(sections) + "\n"


def _columns(results: BenchResults) -> list[tuple[str, int]]:
    return [(model, concurrency) for model in results.models for concurrency in CONCURRENCIES]


def markdown_table(header: Sequence[str], lines: Iterable[Sequence[str]]) -> str:
    rows = [header, ["---"] * len(header), *lines]
    return "\n".join("| " + " | ".join(row) + " |" for row in rows)


def bullets(lines: Iterable[str]) -> str:
    return "\n".join(f"- {line}" for line in lines)


def _number(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:,.1f}"


def _cell(row: Row, key: tuple[str, int], show: str) -> str:
    if row.note is not None:
        return row.note
    point = row.cells.get(key)
    if point is None:
        return MISSING
    load = point.load
    if not load.ok:
        return f"failed: {load.failure}"
    text = _number(load.throughput) if show == "throughput" else f"{load.p50_ms:.2f} / {load.p99_ms:.2f}"
    spread = row.spread(key)
    if show == "throughput" and spread is not None:
        text += f" [{_number(spread[0])}-{_number(spread[1])}]"
    return f"{text} ({load.note})" if load.note else text


def throughput_table(results: BenchResults) -> str:
    """Raw ORT first (batch 1 under c=1, batch 32 under c=32), then every (server, protocol) row."""
    columns = _columns(results)
    header = ["server", "protocol / load", *(f"{model} c={c}" for model, c in columns)]
    raw = ["raw ONNX Runtime in-process (no server)", "batch 1 / batch 32"]
    for model, concurrency in columns:
        limit = results.ort.get(model, {}).get(1 if concurrency == 1 else BATCHED)
        raw.append(
            MISSING if limit is None else _number(limit.throughput) + (" (b32)" if limit.batch > 1 else "")
        )
    lines = [raw] + [
        [row.server, PROTOCOLS[row.protocol], *(_cell(row, key, "throughput") for key in columns)]
        for row in results.rows
    ]
    return markdown_table(header, lines)


def latency_table(results: BenchResults) -> str:
    """p50 / p99 of each cell, as the load generator saw them."""
    columns = _columns(results)
    header = ["server", "protocol / load", *(f"{model} c={c}" for model, c in columns)]
    lines = [
        [row.server, PROTOCOLS[row.protocol], *(_cell(row, key, "latency") for key in columns)]
        for row in results.rows
    ]
    return markdown_table(header, lines)


def ratio_table(results: BenchResults) -> str:
    """conch's throughput (one process, two workers) over each peer's, cell by cell, same
    protocol: the median of the per-round ratios, with their lowest and highest in brackets."""
    columns = _columns(results)
    header = ["conch / peer", *(f"{model} c={c}" for model, c in columns)]
    lines = []
    pairs = [("triton", "http"), ("triton", "grpc"), ("mlserver", "http"), ("naive", "http")]
    for ours, (peer, protocol) in itertools.product(("conch", "conch-2w"), pairs):
        conch, other = results.row(ours, protocol), results.row(peer, protocol)
        if conch is None or other is None:
            continue
        name = f"{conch.server} / {other.server}, {PROTOCOLS[protocol]}"
        if other.note is not None:
            lines.append([name, *([other.note] * len(columns))])
            continue
        lines.append([name, *(_paired_cell(conch, other, key) for key in columns)])
    if not lines:
        return "Nothing to compare: conch or its peers were not run."
    intro = (
        "Each cell: the median over the rounds of conch's throughput over the peer's in the same round, "
        "[lowest-highest] of those per-round ratios when there were several rounds.\n\n"
    )
    return intro + markdown_table(header, lines)


def limit_table(results: BenchResults) -> str:
    """Each row's mlp c=32 throughput over raw ONNX Runtime at batch 32: how much batching recovers."""
    limit = results.ort.get("mlp", {}).get(BATCHED)
    if limit is None:
        return "Not measured: the mlp model was not selected."
    lines = [
        [row.server, PROTOCOLS[row.protocol], _number(value), f"{value / limit.throughput:.0%}"]
        for row in results.rows
        if (value := row.throughput("mlp", BATCHED)) is not None
    ]
    intro = f"Raw ONNX Runtime, mlp batch {BATCHED}: {_number(limit.throughput)} inferences/s.\n\n"
    return intro + markdown_table(["server", "protocol / load", f"mlp c={BATCHED}", "share of limit"], lines)


def overhead_table(results: BenchResults) -> str:
    """p50 at c=1 minus the model's compute, see ``OVERHEAD_NOTE``."""
    header = ["server", "protocol / load", "model", "p50 ms", "p99 ms", "server compute ms"]
    header += ["overhead vs server compute ms", "server request ms", "outside the server's timing ms"]
    header += ["raw ORT b1 ms", "overhead vs raw ORT ms"]
    lines = []
    for row in results.rows:
        for model in results.models:
            point = row.cells.get((model, 1))
            if row.note is not None or point is None or not point.load.ok:
                continue
            p50 = point.load.p50_ms
            raw = results.ort.get(model, {}).get(1)
            compute, request = point.compute_ms, point.request_ms
            lines.append(
                [
                    row.server,
                    PROTOCOLS[row.protocol],
                    model,
                    f"{p50:.3f}",
                    f"{point.load.p99_ms:.3f}",
                    MISSING if compute is None else f"{compute:.3f}",
                    MISSING if compute is None else f"{p50 - compute:.3f}",
                    MISSING if request is None else f"{request:.3f}",
                    MISSING if request is None else f"{p50 - request:.3f}",
                    MISSING if raw is None else f"{raw.median_call_ms:.3f}",
                    MISSING if raw is None else f"{p50 - raw.median_call_ms:.3f}",
                ]
            )
    return markdown_table(header, lines) if lines else "No c=1 point was measured."


def publish(text: str, name: str, results: Path = Path("bench/results")) -> Path:
    """Write a report to ``results/<UTC timestamp>-<name>.md``, print it and where it went."""
    results.mkdir(parents=True, exist_ok=True)
    path = results / f"{datetime.now(UTC):%Y-%m-%d-%H%M%S}-{name}.md"
    path.write_text(text)
    print(text)
    print(f"written to {path}")
    return path
