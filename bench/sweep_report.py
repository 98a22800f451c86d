"""The sweep's report: paired conch/Triton ratios for every (size, protocol, clients) point, the targets
judged on the worst point, the absolute figures, charts (PNG) and the raw data (JSON).

Why the worst point: a figure that holds at one model size and fails at the next is not a property of
the server. The targets apply to every point, so the verdict reads the lowest median ratio over the
sizes, and each median comes with the lowest and highest of its rounds.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from bench.models import MODELS, multiply_adds
from bench.report import MISSING, BenchResults, PairedRatio, Row, paired_ratio

#: The sweep's protocols and how each is driven.
PROTOCOLS = {
    "http_json": "HTTP JSON (wrk)",
    "http_binary": "HTTP binary tensors (perf_analyzer)",
    "grpc": "gRPC (perf_analyzer)",
}
#: Throughput ratio conch/Triton at 32 clients: (target, goal) per protocol.
TARGETS = {"http_json": (1.0, 1.5), "http_binary": (1.0, 1.5), "grpc": (0.8, 1.0)}
TARGET_CLIENTS = 32


def _rows(results: BenchResults, protocol: str) -> tuple[Row | None, Row | None]:
    return results.row("conch", protocol), results.row("triton", protocol)


def ratio(results: BenchResults, protocol: str, key: tuple[str, int], metric: str) -> PairedRatio | None:
    """conch's ``metric`` over Triton's at ``key`` (size, clients), paired by round."""
    ours, theirs = _rows(results, protocol)
    if ours is None or theirs is None or ours.note or theirs.note:
        return None
    return paired_ratio(ours, theirs, key, metric=metric)


def _cell(value: PairedRatio | None) -> str:
    if value is None:
        return MISSING
    if value.rounds == 1:
        return f"{value.median:.2f}x"
    return f"{value.median:.2f}x [{value.low:.2f}-{value.high:.2f}]"


def ratio_table(results: BenchResults, clients: Sequence[int], metric: str) -> str:
    """Sizes down, (protocol, clients) across; each cell the paired ratio of ``metric``."""
    protocols = [p for p in PROTOCOLS if results.row("conch", p) is not None]
    header = ["size", "multiply-adds"] + [f"{p} c={c}" for p in protocols for c in clients]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for size in results.models:
        cells = [_cell(ratio(results, p, (size, c), metric)) for p in protocols for c in clients]
        lines.append(
            f"| {size} {' -> '.join(map(str, MODELS[size]))} | {multiply_adds(size):,} | "
            + " | ".join(cells)
            + " |"
        )
    return "\n".join(lines) + "\n"


def worst(results: BenchResults, protocol: str, clients: int, metric: str) -> tuple[str, PairedRatio] | None:
    """The size with the lowest median throughput ratio (highest for latency), and that ratio."""
    found = [
        (size, value)
        for size in results.models
        if (value := ratio(results, protocol, (size, clients), metric)) is not None
    ]
    if not found:
        return None
    pick = min if metric == "throughput" else max
    return pick(found, key=lambda item: item[1].median)


def target_table(results: BenchResults, clients: Sequence[int]) -> str:
    """Each target against the worst point of the sweep."""
    lines = ["| target | worst point | median there [rounds] | met |", "|---|---|---|---|"]
    if TARGET_CLIENTS in clients:
        for protocol, (target, goal) in TARGETS.items():
            found = worst(results, protocol, TARGET_CLIENTS, "throughput")
            if found is None:
                continue
            size, value = found
            verdict = "goal met" if value.median >= goal else ("yes" if value.median >= target else "no")
            lines.append(
                f"| {protocol} throughput c={TARGET_CLIENTS} >= {target:.1f}x (goal {goal:.1f}x) | {size} | "
                f"{_cell(value)} | {verdict} |"
            )
    if 1 in clients:
        for protocol in PROTOCOLS:
            found = worst(results, protocol, 1, "p50_ms")
            if found is None:
                continue
            size, value = found
            verdict = "yes" if value.median <= 1.0 else "no"
            lines.append(f"| {protocol} p50 c=1 <= 1.0x of Triton's | {size} | {_cell(value)} | {verdict} |")
    return "\n".join(lines) + "\n"


def absolute_table(results: BenchResults, clients: Sequence[int]) -> str:
    """Each server's median-round throughput and p50 per point."""
    header = ["server", "protocol", "size"] + [f"c={c}" for c in clients]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in results.rows:
        for size in results.models:
            if row.note:
                cells = [row.note] * len(clients)
            else:
                cells = []
                for c in clients:
                    point = row.cells.get((size, c))
                    if point is None or not point.load.ok:
                        cells.append(point.load.failure or MISSING if point else MISSING)
                    else:
                        flag = " (unstable)" if point.load.note else ""
                        cells.append(f"{point.load.throughput:,.0f}/s, p50 {point.load.p50_ms:.2f} ms{flag}")
            lines.append(f"| {row.server} | {row.protocol} | {size} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def render(results: BenchResults, clients: Sequence[int], charts: Sequence[str]) -> str:
    """The whole Markdown report."""
    parts = [
        f"# Model-size sweep: conch against Triton's python backend, {results.started}\n",
        "## Targets, judged on the worst point\n",
        target_table(results, clients),
        "## Throughput ratio conch / Triton (median of per-round ratios [lowest-highest])\n",
        ratio_table(results, clients, "throughput"),
        "## p50 latency ratio conch / Triton (below 1.0: conch answers sooner)\n",
        ratio_table(results, clients, "p50_ms"),
        "## Charts\n",
        "".join(f"![{name}]({name})\n\n" for name in charts) or "(matplotlib missing: no charts)\n",
        "## Throughput and p50 per server (the median round)\n",
        absolute_table(results, clients),
        "## Machine\n",
        "".join(f"- {line}\n" for line in results.machine),
        "\n## Method\n",
        "".join(f"- {line}\n" for line in results.method),
    ]
    return "\n".join(parts)


def write_charts(results: BenchResults, clients: Sequence[int], stem: Path) -> list[Path]:
    """``STEM-ratio.png`` (throughput ratio against model size, one line per protocol and client count)
    and ``STEM-latency.png`` (p50 against clients, per protocol, both servers, smallest/middle/largest
    size). Returns the files written; none when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib import ticker
    except ImportError:
        return []
    written = []
    figure, axes = plt.subplots(figsize=(9, 5.5))
    for protocol in PROTOCOLS:
        for c in clients:
            points = [
                (multiply_adds(size), value.median)
                for size in results.models
                if (value := ratio(results, protocol, (size, c), "throughput")) is not None
            ]
            if points:
                xs, ys = zip(*points, strict=True)
                style = "-o" if c == TARGET_CLIENTS else ("--." if c == 1 else ":.")
                axes.plot(xs, ys, style, label=f"{protocol} c={c}")
    axes.axhline(1.0, color="grey", linewidth=0.8)
    axes.set_xscale("log")
    axes.set_xlabel("model size (multiply-adds per row, log)")
    axes.set_ylabel("throughput, conch / Triton (paired median)")
    axes.set_title("conch / Triton python backend, by model size")
    axes.legend(fontsize=7, ncol=3)
    figure.tight_layout()
    path = stem.parent / f"{stem.name}-ratio.png"
    figure.savefig(path, dpi=110)
    plt.close(figure)
    written.append(path)

    picks = sorted(
        {results.models[0], results.models[len(results.models) // 2], results.models[-1]},
        key=results.models.index,
    )
    figure, grid = plt.subplots(1, len(PROTOCOLS), figsize=(13, 4.5), sharey=False)
    for axes, protocol in zip(grid, PROTOCOLS, strict=True):
        for row in results.rows:
            if row.protocol != protocol or row.note:
                continue
            for size in picks:
                points = [
                    (c, p.load.p50_ms)
                    for c in clients
                    if (p := row.cells.get((size, c))) is not None and p.load.ok
                ]
                if points:
                    xs, ys = zip(*points, strict=True)
                    axes.plot(xs, ys, "-o" if row.peer == "conch" else "--s", label=f"{row.peer} {size}")
        axes.set_xscale("log", base=2)
        axes.set_yscale("log")
        axes.xaxis.set_major_formatter(ticker.ScalarFormatter())
        axes.yaxis.set_major_formatter(ticker.ScalarFormatter())
        axes.set_xlabel("clients")
        axes.set_ylabel("p50 latency, ms (log)")
        axes.set_title(protocol)
        axes.legend(fontsize=7)
    figure.tight_layout()
    path = stem.parent / f"{stem.name}-latency.png"
    figure.savefig(path, dpi=110)
    plt.close(figure)
    written.append(path)
    return written


def write_data(results: BenchResults, path: Path) -> None:
    """Every round's point as JSON, so a chart or a table can be redrawn without rerunning."""
    rows = [
        {
            "server": row.peer,
            "protocol": row.protocol,
            "note": row.note,
            "points": [
                {"size": size, "clients": c, "round": n, **asdict(point.load)}
                for (size, c), by_round in row.rounds.items()
                for n, point in sorted(by_round.items())
            ],
        }
        for row in results.rows
    ]
    path.write_text(
        json.dumps({"started": results.started, "machine": results.machine, "rows": rows}, indent=1)
    )
