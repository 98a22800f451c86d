"""The Markdown report of ``python -m bench.python_backend``: conch over Triton on the same model.py.

The throughput, latency and overhead tables are ``bench.report``'s. What is added here are the paired
ratios this comparison is about: for each model, protocol and concurrency, conch's throughput over
Triton's from the same round, and at concurrency 1 conch's p50 over Triton's (lower is better), each
as the median round, the worst round, and every round; then each against issue 14's target (conch at
least 1.0x Triton's throughput at c=32 and no worse p50 at c=1) and goal (1.5x).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bench import report
from bench.report import PROTOCOLS, BenchResults, Row, paired_ratio, round_ratios

TARGET = 1.0
GOAL = 1.5
BLS_ONNX = "_bls_onnx"
ONNX = "_onnx"
RATIO_NOTE = (
    "conch's figure over Triton's from the same round; `median, worst W (every round)`. For throughput "
    "the worst round is the lowest ratio, for p50 the highest. conch only: `NAME_onnx` (the ONNX file "
    "served natively, no model.py) is set against Triton's `NAME_python`, and `NAME_bls_onnx` (the same "
    "BLS model.py calling `NAME_onnx`) against Triton's `NAME_bls` (calling `NAME_python`): what "
    "moving the ONNX callee out of the python backend gives on conch.\n\n"
)


@dataclass(frozen=True)
class Pairing:
    """One conch row and cell set against Triton's: the model and protocol compared."""

    model: str
    peer_model: str
    protocol: str
    ours: Row
    theirs: Row


def triton_model(model: str) -> str:
    """The Triton model a conch model is compared with: the same one, or for conch's ONNX-served pair
    the python-backend one it stands for (``NAME_onnx`` -> ``NAME_python``, ``NAME_bls_onnx`` ->
    ``NAME_bls``)."""
    if model.endswith(BLS_ONNX):
        return model.removesuffix(BLS_ONNX) + "_bls"
    return model.removesuffix(ONNX) + "_python" if model.endswith(ONNX) else model


def pairings(results: BenchResults, sides: Sequence[str]) -> list[Pairing]:
    """Every (model, protocol) of ``sides[0]`` (conch) with ``sides[1]`` (Triton)'s row."""
    ours, theirs = sides
    found = []
    for model in results.models:
        for mine in (row for row in results.rows if row.peer == ours):
            peer = results.row(theirs, mine.protocol)
            if peer is not None:
                found.append(Pairing(model, triton_model(model), mine.protocol, mine, peer))
    return found


def ratio_cell(pairing: Pairing, concurrency: int, metric: str) -> str:
    """``median, worst W (r1, r2, ...)`` of the per-round ratios, or ``-`` where no round pairs."""
    key, peer_key = (pairing.model, concurrency), (pairing.peer_model, concurrency)
    if pairing.ours.note or pairing.theirs.note:
        return pairing.ours.note or pairing.theirs.note or report.MISSING
    ratios = round_ratios(pairing.ours, pairing.theirs, key, peer_key, metric)
    summary = paired_ratio(pairing.ours, pairing.theirs, key, peer_key, metric)
    if summary is None:
        return report.MISSING
    worst = summary.low if metric == "throughput" else summary.high
    if summary.rounds == 1:
        return f"{summary.median:.2f}x"
    every = ", ".join(f"{ratio:.2f}" for ratio in ratios.values())
    return f"{summary.median:.2f}x, worst {worst:.2f}x ({every})"


def ratio_table(results: BenchResults, sides: Sequence[str]) -> str:
    header = ["conch model", "Triton model", "protocol", "throughput c=1", "throughput c=32", "p50 c=1"]
    lines = [
        [
            p.model,
            p.peer_model,
            PROTOCOLS[p.protocol],
            ratio_cell(p, 1, "throughput"),
            ratio_cell(p, 32, "throughput"),
            ratio_cell(p, 1, "p50_ms"),
        ]
        for p in pairings(results, sides)
    ]
    return RATIO_NOTE + report.markdown_table(header, lines) if lines else "Nothing to compare."


def verdict(pairing: Pairing, concurrency: int, metric: str, bound: float) -> str:
    """Whether the ratio meets ``bound`` (at least, for throughput; at most, for latency) in the median
    round and in the worst one."""
    key, peer_key = (pairing.model, concurrency), (pairing.peer_model, concurrency)
    summary = paired_ratio(pairing.ours, pairing.theirs, key, peer_key, metric)
    if summary is None:
        return report.MISSING
    higher = metric == "throughput"
    median_ok = summary.median >= bound if higher else summary.median <= bound
    worst = summary.low if higher else summary.high
    worst_ok = worst >= bound if higher else worst <= bound
    if worst_ok:
        return "yes, every round"
    return f"median only (worst {worst:.2f}x)" if median_ok else f"no ({summary.median:.2f}x)"


def target_table(results: BenchResults, sides: Sequence[str]) -> str:
    header = ["conch model", "protocol", f"c=32 throughput >= {TARGET:.1f}x", f"goal >= {GOAL:.1f}x"]
    header.append(f"c=1 p50 <= {TARGET:.1f}x")
    lines = [
        [
            p.model,
            PROTOCOLS[p.protocol],
            verdict(p, 32, "throughput", TARGET),
            verdict(p, 32, "throughput", GOAL),
            verdict(p, 1, "p50_ms", TARGET),
        ]
        for p in pairings(results, sides)
    ]
    intro = (
        f"Issue 14's target: conch at least {TARGET:.1f}x Triton's throughput at c=32 and no worse p50 "
        f"at c=1 on the same model.py; goal {GOAL:.1f}x.\n\n"
    )
    return intro + report.markdown_table(header, lines) if lines else "Nothing to compare."


def cpu_table(results: BenchResults, concurrency: int = 32) -> str:
    """CPU microseconds per request at ``concurrency``, the server's process / its model processes,
    from the median round's point."""
    header = ["server", "protocol / load", *results.models]
    lines = []
    for row in results.rows:
        cells = []
        for model in results.models:
            point = row.cells.get((model, concurrency))
            if point is None or not point.load.ok or point.server_cpu_us is None:
                cells.append(report.MISSING)
            else:
                cells.append(f"{point.server_cpu_us:,.0f} / {point.children_cpu_us or 0.0:,.0f}")
        lines.append([row.server, PROTOCOLS[row.protocol], *cells])
    intro = (
        "User + system CPU per request the server counted (`/proc`, read before and after the point): "
        "the server's own process / its model processes together (a BLS request counts its callee's "
        "work too). On two cores shared with the load generator, throughput at c=32 is bounded by it.\n\n"
    )
    return intro + report.markdown_table(header, lines)


def render(results: BenchResults, sides: Sequence[str]) -> str:
    """The whole report as Markdown; ``sides`` are the row keys of conch and of Triton, in that order."""
    sections = [
        f"# The same python-backend model.py on conch and Triton, {results.started}",
        "## Machine and versions\n\n" + report.bullets(results.machine),
        "## How\n\n" + report.bullets(results.method),
        "## Throughput, inferences per second (batch 1 per request)\n\n" + report.throughput_table(results),
        "## Latency p50 / p99, milliseconds\n\n" + report.latency_table(results),
        "## Paired ratios, conch / Triton\n\n" + ratio_table(results, sides),
        "## Against the target\n\n" + target_table(results, sides),
        "## CPU per request at c=32, microseconds\n\n" + cpu_table(results),
        "## Server overhead at c=1\n\n" + report.OVERHEAD_NOTE + report.overhead_table(results),
    ]
    return "\n\n".join(sections) + "\n"
