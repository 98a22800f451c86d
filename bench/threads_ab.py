"""``python -m bench.threads_ab``: a model on conch's choice of ONNX Runtime threads against the same
model with ``intra_op_thread_count`` set to every core, under load.

Why: conch gives a model whose runs are short one intra-op thread (``conch.backends.onnxruntime_threads``),
because waking a sleeping thread for each parallel operator costs more than the operator. This
shows what that does to a server: two ``conch serve`` processes, each with the sizes of
``--sizes`` (``bench/models.py``), one as conch configures them and one with the threads fixed at
the core count (ONNX Runtime's and Triton's default); then, round after round, each point is taken
on one server and at once on the other, the order alternating. Per point it reports throughput,
the server's CPU per request (``/proc``), and what one execution took inside the server (the
``batch_stats`` of ``/v2/models/NAME/stats``), which the machine's noise moves much less than
throughput. ``--threads N`` sets conch's side explicitly instead (to try one thread on a model that
conch leaves on the default).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from bench.loadgen import PerfTarget, infer_body, perf_analyzer_point, run_wrk
from bench.models import SWEEP_MODELS, write_conch_repository
from bench.peers import serve_conch
from bench.run import RESULTS, describe_machine, round_order, write_report
from bench.servers import ServerProcess, cpu_reading

PROTOCOLS = ("grpc", "http_json")
SIDES = ("chosen", "all cores")


@dataclass(frozen=True)
class Reading:
    """One point on one server: requests/s, server CPU a request (us), one execution (us), rows per
    execution."""

    rate: float
    cpu_us: float
    run_us: float
    batch: float


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.threads_ab", description=__doc__)
    parser.add_argument("--sizes", default="s64,s128,s256", help=f"of {','.join(SWEEP_MODELS)}")
    parser.add_argument("--protocols", default=",".join(PROTOCOLS), help="of grpc,http_json")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0, help="per point (default 5)")
    parser.add_argument(
        "--threads", type=int, default=0, help="conch's side: this many threads (0: conch's choice)"
    )
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    return parser.parse_args(argv)


def write_repositories(root: Path, sizes: list[str], threads: int) -> dict[str, Path]:
    """One repository per side; the "all cores" side sets ``intra_op_thread_count`` to the cores."""
    fixed = {"chosen": threads, "all cores": os.cpu_count() or 1}
    repositories = {}
    for side in SIDES:
        repository = write_conch_repository(root / side.replace(" ", "-"), sizes)
        if fixed[side]:
            for name in sizes:
                config = repository / name / "config.pbtxt"
                count = f'value {{ string_value: "{fixed[side]}" }}'
                config.write_text(
                    config.read_text() + f'parameters {{ key: "intra_op_thread_count" {count} }}\n'
                )
        repositories[side] = repository
    return repositories


def executions(server: ServerProcess, model: str) -> tuple[int, int, int]:
    """(requests answered, executions, nanoseconds in executions) so far."""
    with urllib.request.urlopen(f"{server.ports.http_url}/v2/models/{model}/stats", timeout=10) as reply:
        stats = json.load(reply)["model_stats"][0]
    batches = stats["batch_stats"]
    return (
        int(stats["inference_stats"]["success"]["count"]),
        sum(int(b["compute_infer"]["count"]) for b in batches),
        sum(int(b["compute_infer"]["ns"]) for b in batches),
    )


def measure(
    server: ServerProcess, model: str, protocol: str, args: argparse.Namespace, work: Path
) -> Reading:
    before, cpu_before = executions(server, model), cpu_reading(server)
    if protocol == "http_json":
        body = work / f"{model}.json"
        if not body.exists():
            body.write_bytes(infer_body(model))
        url = f"{server.ports.http_url}/v2/models/{model}/infer"
        result = run_wrk(url, body, args.concurrency, args.seconds, work)
    else:
        target = PerfTarget(model, server.ports.grpc_address, "grpc")
        result = perf_analyzer_point(target, args.concurrency, args.seconds, work)
    after, cpu_after = executions(server, model), cpu_reading(server)
    answered, runs, run_ns = (b - a for a, b in zip(before, after, strict=True))
    cpu = (cpu_after[0] - cpu_before[0]) if cpu_after and cpu_before else 0.0
    return Reading(
        result.throughput, cpu / max(answered, 1) * 1e6, run_ns / max(runs, 1) / 1e3, answered / max(runs, 1)
    )


def render(
    readings: dict[tuple[str, str, str], list[Reading]], args: argparse.Namespace, started: datetime
) -> str:
    chosen = f"{args.threads} thread(s)" if args.threads else "conch's choice"
    lines = [
        f"# ONNX Runtime threads under load: {chosen} against every core, {started:%Y-%m-%d %H:%M} UTC",
        "",
        f"{args.concurrency} clients, {args.rounds} rounds of {args.seconds:g} s per point, both servers up, "
        "each point taken on one and at once on the other (order alternating). Ratios are chosen / all "
        "cores per round; median [lowest-highest].",
        "",
        "| size | protocol | throughput ratio | server CPU a request, us (chosen / all cores) "
        "| one execution, us (chosen / all cores) | rows an execution |",
        "|---|---|---|---|---|---|",
    ]
    for size in args.sizes:
        for protocol in args.protocols:
            mine, theirs = readings[(size, protocol, SIDES[0])], readings[(size, protocol, SIDES[1])]
            ratios = [a.rate / b.rate for a, b in zip(mine, theirs, strict=True) if b.rate]
            spread = f"{statistics.median(ratios):.2f}x [{min(ratios):.2f}-{max(ratios):.2f}]"
            lines.append(
                f"| {size} | {protocol} | {spread} "
                f"| {_medians(mine, 'cpu_us')} / {_medians(theirs, 'cpu_us')} "
                f"| {_medians(mine, 'run_us')} / {_medians(theirs, 'run_us')} "
                f"| {_medians(mine, 'batch', 1)} / {_medians(theirs, 'batch', 1)} |"
            )
    lines += ["", "## Rounds", ""]
    for (size, protocol, side), rows in readings.items():
        cells = ", ".join(f"{r.rate:,.0f}/s {r.cpu_us:.0f} us CPU {r.run_us:.0f} us run" for r in rows)
        lines.append(f"- {size} {protocol} {side}: {cells}")
    lines += [
        "",
        "## Machine",
        "",
        *[f"- {line}" for line in describe_machine()],
        "",
    ]
    return "\n".join(lines)


def _medians(rows: list[Reading], field: str, digits: int = 0) -> str:
    return f"{statistics.median(getattr(r, field) for r in rows):.{digits}f}"


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    args.sizes = [s for s in args.sizes.split(",") if s]
    args.protocols = [p for p in args.protocols.split(",") if p]
    started = datetime.now(UTC)
    readings: dict[tuple[str, str, str], list[Reading]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        repositories = write_repositories(work, args.sizes, args.threads)
        servers = {side: serve_conch(repositories[side], work / side.replace(" ", "-")) for side in SIDES}
        for server in servers.values():
            server.start()
        try:
            for size in args.sizes:
                for server in servers.values():  # warm-up: the batcher's figures settle
                    measure(
                        server, size, "http_json", argparse.Namespace(**{**vars(args), "seconds": 1}), work
                    )
                for round_number in range(1, args.rounds + 1):
                    for index, protocol in enumerate(args.protocols):
                        for side in round_order(SIDES, round_number + index):
                            reading = measure(servers[side], size, protocol, args, work)
                            readings.setdefault((size, protocol, side), []).append(reading)
                            print(f"{size} {protocol} round {round_number} {side}: {reading}", flush=True)
        finally:
            for server in servers.values():
                server.stop()
    name = started.strftime("%Y-%m-%d-%H%M%S") + "-threads-ab.md"
    write_report(render(readings, args, started), args.results_dir, name, "bench.threads_ab")


if __name__ == "__main__":
    main()
