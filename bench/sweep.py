"""``python -m bench.sweep``: conch against Triton 2.51's python backend over a family of MLP sizes.

Why: one model size says little. At ``mlp`` conch led Triton, at sizes between ``tiny`` and ``mlp`` it
trailed; a user's model is any size. The sweep runs every size of ``bench.models.SWEEP_MODELS``, from
overhead-bound (16 -> 64 -> 4) to compute-bound (1024 -> 4096 -> 4096 -> 1000), over HTTP JSON (wrk),
HTTP with binary tensors and gRPC (perf_analyzer), at 1, 8 and 32 clients, on both servers, in rounds
of alternating order (conch then Triton, Triton then conch, ...). Every ratio is paired: conch's figure
over Triton's from the same round; the report gives the median of those with their lowest and highest.

conch serves the ONNX file natively, as its users do; Triton runs it from a python-backend ``model.py``
(``bench/peer_code/triton_model.py``, an ONNX Runtime session), the only backend the Triton here has.
Both get ``max_batch_size: 64``, 500 us of dynamic batching delay and one CPU instance.

The full sweep (9 sizes, 3 rounds) takes over an hour; run it in parts with ``--sizes`` (each part
writes its own report and charts) or use ``--quick`` (three sizes, one round of 2 s points).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

from bench import loadgen
from bench.models import SWEEP_MODELS, write_conch_repository, write_triton_repository
from bench.peers import PEERS, PeerUnavailable, serve_conch, serve_triton
from bench.python_backend import quiet_cores, run_side, server_about
from bench.report import BenchResults, Point, Row
from bench.run import (
    add_round_arguments,
    choices,
    describe_machine,
    keep_log,
    loadavg,
    round_order,
    settle_round_arguments,
)
from bench.servers import ServerError, ServerProcess, measure_between
from bench.sweep_report import PROTOCOLS, render, write_charts, write_data

CONCURRENCIES = (1, 8, 32)
QUICK_SIZES = ("tiny", "s256", "huge")
WARMUP_S = 1.0


@dataclass(frozen=True)
class Side:
    """One server of the pair: its key, its title in the report, how its repository is written and how
    it starts."""

    key: str
    title: str
    write: Callable[[Path, Sequence[str]], Path]
    serve: Callable[[Path, Path], ServerProcess]


SIDES = (
    Side("conch", "conch", write_conch_repository, serve_conch),
    Side("triton", PEERS["triton"].title, write_triton_repository, serve_triton),
)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.sweep", description=__doc__.splitlines()[0])
    add_round_arguments(parser)
    parser.add_argument(
        "--sizes",
        default=None,
        help=f"model sizes (default all: {','.join(SWEEP_MODELS)}; with --quick {','.join(QUICK_SIZES)})",
    )
    parser.add_argument(
        "--protocols", default=",".join(PROTOCOLS), help=f"of {','.join(PROTOCOLS)} (default all)"
    )
    parser.add_argument(
        "--concurrencies",
        default=",".join(map(str, CONCURRENCIES)),
        help="client counts (default 1,8,32)",
    )
    parser.add_argument(
        "--sequential",
        dest="interleave",
        action="store_false",
        help="measure one server's whole round, then the other's (default: both servers up, each point "
        "taken on one and at once on the other)",
    )
    args = parser.parse_args(argv)
    default_sizes = QUICK_SIZES if args.quick else tuple(SWEEP_MODELS)
    args.sizes = choices(parser, "--sizes", args.sizes or ",".join(default_sizes), SWEEP_MODELS)
    args.protocols = choices(parser, "--protocols", args.protocols, PROTOCOLS)
    try:
        args.concurrencies = sorted({int(item) for item in args.concurrencies.split(",") if item.strip()})
    except ValueError:
        parser.error(f"--concurrencies: expected integers like 1,8,32, got {args.concurrencies!r}")
    if not args.concurrencies or min(args.concurrencies) < 1:
        parser.error("--concurrencies: each client count must be at least 1")
    return settle_round_arguments(parser, args)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = datetime.now(UTC)
    results = BenchResults(
        started=started.strftime("%Y-%m-%d %H:%M UTC"),
        machine=describe_machine(),
        method=describe_method(args.seconds, args.rounds, args.interleave),
        models=list(args.sizes),
    )
    print(
        f"bench.sweep: {', '.join(args.sizes)}; {', '.join(args.protocols)}; c={args.concurrencies}; "
        f"{args.seconds:g} s per point, {args.rounds} round(s)",
        flush=True,
    )
    rows = {side.key: [Row(side.key, side.title, protocol) for protocol in args.protocols] for side in SIDES}
    results.rows += [row for side in SIDES for row in rows[side.key]]
    with tempfile.TemporaryDirectory(prefix="conch-bench-sweep-") as folder:
        repositories = {side.key: side.write(Path(folder) / side.key / "repo", args.sizes) for side in SIDES}
        run_rounds(args, repositories, rows, results, Path(folder))
    results.machine.append(f"load average at the end: {loadavg()}")
    stem = started.strftime("%Y-%m-%d-%H%M%S") + "-sweep" + ("-quick" if args.quick else "")
    args.results_dir.mkdir(parents=True, exist_ok=True)
    charts = write_charts(results, args.concurrencies, args.results_dir / stem)
    text = render(results, args.concurrencies, [chart.name for chart in charts])
    print("\n" + text)
    path = args.results_dir / (stem + (".quick.md" if args.quick else ".md"))
    path.write_text(text)
    write_data(results, args.results_dir / (stem + ".json"))
    print(f"bench.sweep: written to {path}" + "".join(f", {chart}" for chart in charts))
    return 0


def measure_sizes(
    args: argparse.Namespace, rows: list[Row], workdir: Path, round_number: int, server: ServerProcess
) -> None:
    """Every size's points on a started server."""
    for size in args.sizes:
        body = prepare_size(server, size, rows, workdir, round_number, args)
        if body is None:
            continue
        for row in rows:
            for concurrency in args.concurrencies:
                measure_point(server, size, row, concurrency, body, workdir, round_number, args)


def prepare_size(
    server: ServerProcess,
    size: str,
    rows: list[Row],
    workdir: Path,
    round_number: int,
    args: argparse.Namespace,
) -> Path | None:
    """A sanity request and a second of warm-up for ``size``; the JSON body's file, or None when the
    sanity request failed (then every point of ``size`` in ``rows`` is marked failed)."""
    body = workdir / f"{size}.json"
    body.write_bytes(loadgen.infer_body(size))
    url = f"{server.ports.http_url}/v2/models/{size}/infer"
    try:
        server.post_json(f"/v2/models/{size}/infer", body.read_bytes())
    except OSError as exc:
        for row in rows:
            for concurrency in args.concurrencies:
                failed = Point(loadgen.LoadResult.failed(f"sanity request: {exc}"))
                row.add((size, concurrency), failed, round_number)
        return None
    loadgen.run_wrk(url, body, max(args.concurrencies), WARMUP_S, workdir)
    return body


def measure_point(
    server: ServerProcess,
    size: str,
    row: Row,
    concurrency: int,
    body: Path,
    workdir: Path,
    round_number: int,
    args: argparse.Namespace,
) -> None:
    """One (protocol, concurrency) point of ``size``, recorded in ``row`` with the server's own times."""
    load = point_load(server, size, row.protocol, concurrency, body, args.seconds, workdir)
    result, times = measure_between(server, size, load)
    row.add((size, concurrency), Point(result, times.compute_ms, times.request_ms), round_number)
    print(
        f"  {row.peer} {size} {row.protocol} c={concurrency}: {result.throughput:,.0f}/s "
        f"p50 {result.p50_ms:.2f} ms ({result.failure or result.note or 'ok'})",
        flush=True,
    )


def run_rounds(
    args: argparse.Namespace,
    repositories: dict[str, Path],
    rows: dict[str, list[Row]],
    results: BenchResults,
    folder: Path,
) -> None:
    """Every round: interleaved (:func:`interleaved_round`, the default) or one server's whole round,
    then the other's (``--sequential``)."""
    sides = {side.key: side for side in SIDES}
    for round_number in range(1, args.rounds + 1):
        print(f"round {round_number} of {args.rounds}", flush=True)
        if args.interleave:
            interleaved_round(args, sides, repositories, rows, results, folder, round_number)
            continue
        for key in round_order(list(sides), round_number):
            workdir = folder / key
            measure = partial(measure_sizes, args, rows[key], workdir, round_number)
            run_side(sides[key], repositories[key], workdir, rows[key], results, round_number, measure)


def interleaved_round(
    args: argparse.Namespace,
    sides: dict[str, Side],
    repositories: dict[str, Path],
    rows: dict[str, list[Row]],
    results: BenchResults,
    folder: Path,
    round_number: int,
) -> None:
    """Both servers up; every point on one, then at once on the other, the order alternating from
    point to point, so a pair is measured seconds apart rather than half a round apart. Why: this
    machine's cores ran 1.6 times faster at some moments of a run than at others
    (``bench/core_speed.py``), so a pair taken twenty minutes apart measured the machine as much as
    the servers. The server not under load idles meanwhile."""
    with contextlib.ExitStack() as started:
        servers: dict[str, ServerProcess] = {}
        for key in round_order(list(sides), round_number):
            busy = f"cores {quiet_cores():.0%} busy with other jobs just before it started"
            workdir = folder / key
            started.callback(keep_log, workdir / f"{key}.log")
            try:
                servers[key] = started.enter_context(sides[key].serve(repositories[key], workdir))
            except (PeerUnavailable, ServerError, OSError) as exc:
                note = str(exc).splitlines()[0]
                print(f"  {key}: {note}", file=sys.stderr, flush=True)
                for row in rows[key]:
                    row.note = note
                continue
            results.machine.append(server_about(sides[key], servers[key], round_number, busy))
        for size in args.sizes:
            bodies = {
                key: prepare_size(server, size, rows[key], folder / key, round_number, args)
                for key, server in servers.items()
            }
            ready = [key for key in servers if bodies[key] is not None]
            points = [(index, c) for index in range(len(args.protocols)) for c in args.concurrencies]
            for number, (index, concurrency) in enumerate(points):
                for key in round_order(ready, round_number + number):
                    body = bodies[key]
                    assert body is not None
                    row = rows[key][index]
                    measure_point(
                        servers[key], size, row, concurrency, body, folder / key, round_number, args
                    )


def point_load(
    server: ServerProcess,
    size: str,
    protocol: str,
    concurrency: int,
    body: Path,
    seconds: float,
    workdir: Path,
    wrk_threads: int = 1,
) -> Callable[[], loadgen.LoadResult]:
    """The load of one point: wrk POSTing JSON, or perf_analyzer over HTTP (binary tensors) or gRPC."""
    if protocol == "http_json":
        url = f"{server.ports.http_url}/v2/models/{size}/infer"
        return lambda: loadgen.run_wrk(url, body, concurrency, seconds, workdir, threads=wrk_threads)
    address = server.ports.http_address if protocol == "http_binary" else server.ports.grpc_address
    target = loadgen.PerfTarget(size, address, "http" if protocol == "http_binary" else "grpc")
    return lambda: loadgen.perf_analyzer_point(target, concurrency, seconds, workdir)


def describe_method(seconds: float, rounds: int, interleave: bool = True) -> list[str]:
    """How the points were taken, so the report reads without this source."""
    window = loadgen.perf_analyzer_window_ms(seconds)
    sizes = "; ".join(f"{name} {' -> '.join(map(str, widths))}" for name, widths in SWEEP_MODELS.items())
    pairing = (
        "each round starts conch and Triton together and takes every point on one, then at once on the "
        "other (the idle one waits), the order alternating from point to point"
        if interleave
        else "each round starts, measures and stops conch and Triton one after the other, the order "
        "reversed every other round"
    )
    return [
        f"{rounds} round(s); {pairing}; every ratio pairs the two servers' figures of one round",
        f"sizes (FP32 Gemm+Relu MLPs, random weights): {sizes}",
        "conch: `conch serve` as checked out, the ONNX file served natively; Triton 2.51: the same ONNX "
        "file in a python-backend `model.py` (`bench/peer_code/triton_model.py`); both `max_batch_size: "
        "64`, `dynamic_batching { max_queue_delay_microseconds: 500 }`, one KIND_CPU instance",
        f"HTTP JSON: `wrk -t1 -cC -d{max(1, round(seconds))}s` POSTing one batch-1 JSON body; HTTP binary "
        f"and gRPC: `perf_analyzer -i {{http,grpc}} --concurrency-range C -p {window} -s 25 -r 6`, rerun "
        'with `-s 100 -r 3` and marked "unstable" where no 3 windows agree within 25 %; batch 1 per request',
        f"{WARMUP_S:g} s of wrk at the highest concurrency warms each size before its points; the load "
        "generators share the server's cores",
    ]


if __name__ == "__main__":
    sys.exit(main())
