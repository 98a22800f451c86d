"""What OpenTelemetry tracing costs a request: conch with tracing off and with every request traced,
against conch without the tracing hooks at all, at 32 clients on the ``tiny`` model.

    .venv/bin/python -m bench.tracing_overhead                      # 3 rounds of 10 s points, HTTP
    .venv/bin/python -m bench.tracing_overhead --protocols http,grpc --seconds 5 --rounds 3
    .venv/bin/python -m bench.tracing_overhead --baseline 4437f92   # another commit to compare with
    .venv/bin/python -m bench.tracing_overhead --baseline /tmp/tree # or a folder holding a conch/

Three servers per round, each started fresh, warmed for 2 s, then measured (``wrk`` over HTTP JSON,
``perf_analyzer`` over gRPC): ``baseline`` (``--baseline``, by default the commit before
``conch/observability/tracing.py`` existed), ``off`` (``--current``, by default HEAD, with no tracing
flag) and ``on`` (the same, with ``--trace-otlp-endpoint`` to an OTLP/HTTP sink in this process that
reads and drops each export, and ``--trace-sample-ratio`` from ``--ratio``, 1.0 by default). A
commit is unpacked with ``git archive``, so uncommitted changes in the working tree are not
measured; a folder is run as it is.
The rounds alternate the order. A ratio is the median of the per-round ratios (lowest and highest
in brackets), as in ``bench.run``: on a shared 2-core machine one point can be 20-30% off, so the
figures are indicative.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from bench.loadgen import LoadResult, PerfTarget, infer_body, perf_analyzer_point, run_wrk
from bench.models import write_conch_repository
from bench.servers import Ports, ServerProcess, ServerTimes, measure_between

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ("baseline", "off", "on")
MODEL = "tiny"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.tracing_overhead", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="each measured point (default 10)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the three servers (default 3)")
    parser.add_argument("--clients", type=int, default=32, help="concurrent connections (default 32)")
    parser.add_argument("--protocols", default="http", help="http, grpc or http,grpc (default http)")
    parser.add_argument("--ratio", default="1.0", help="the 'on' server's --trace-sample-ratio (default 1.0)")
    parser.add_argument(
        "--handler",
        action="store_true",
        help="only the in-process gRPC handler's CPU per call (bench.tracing_handler)",
    )
    parser.add_argument(
        "--configs", default=",".join(CONFIGS), help="the servers to run, of baseline,off,on (default all)"
    )
    parser.add_argument(
        "--baseline", default="", help="a commit or a folder without tracing (default: the commit before it)"
    )
    parser.add_argument("--current", default="HEAD", help="a commit or a folder with tracing (default HEAD)")
    return parser.parse_args(argv)


def before_tracing() -> str:
    """The commit before the one that added ``conch/observability/tracing.py``."""
    added = subprocess.run(
        ["git", "log", "--format=%H", "--diff-filter=A", "--", "conch/observability/tracing.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    if not added:
        raise SystemExit("no commit added conch/observability/tracing.py; name one with --baseline")
    return f"{added[-1]}^"


def unpack(rev: str, into: Path) -> Path:
    """The tree of ``rev`` as files (``git archive``), to run its ``conch`` from."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", rev], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


@contextmanager
def otlp_sink() -> Iterator[tuple[str, list[int]]]:
    """An OTLP/HTTP endpoint that reads each export and answers 200: its URL and the bytes received."""
    received: list[int] = []

    class Sink(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(len(self.rfile.read(int(self.headers.get("content-length", 0)))))
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1/traces", received
    finally:
        server.shutdown()
        server.server_close()


def measure(
    server: ServerProcess, protocol: str, clients: int, seconds: float, work: Path
) -> tuple[LoadResult, ServerTimes]:
    """A 2 s warm-up, then the measured point, with the server's CPU per request meanwhile (less
    swayed than requests/s by what else the machine runs)."""
    if protocol == "grpc":
        target = PerfTarget(MODEL, server.ports.grpc_address)
        perf_analyzer_point(target, clients, 2, work)
        return measure_between(server, MODEL, lambda: perf_analyzer_point(target, clients, seconds, work))
    body = work / "body.json"
    body.write_bytes(infer_body(MODEL))
    url = f"{server.ports.http_url}/v2/models/{MODEL}/infer"
    run_wrk(url, body, clients, 2, work)
    return measure_between(server, MODEL, lambda: run_wrk(url, body, clients, seconds, work))


def server_for(
    config: str, repository: Path, tree: Path, sink: str, logs: Path, ratio: str = "1.0"
) -> ServerProcess:
    ports = Ports()
    command = [sys.executable, "-m", "conch.cli.main", "serve", str(repository), "--host", "127.0.0.1"]
    command += ["--http-port", str(ports.http), "--grpc-port", str(ports.grpc)]
    command += ["--metrics-port", str(ports.metrics)]
    if config == "on":
        command += ["--trace-otlp-endpoint", sink, "--trace-sample-ratio", ratio]
    # Run from the tree whose conch is measured: ``-m`` puts the working folder first on sys.path.
    return ServerProcess(config, command, ports, logs / f"{config}.log", cwd=tree)


def handler_rounds(rounds: int, repository: Path, baseline: Path, current: Path) -> int:
    """``bench.tracing_handler`` in each tree, alternating: CPU us per ModelInfer call, in process."""
    script = Path(__file__).with_name("tracing_handler.py")
    figures: dict[str, list[float]] = {config: [] for config in CONFIGS}
    with otlp_sink() as (sink, _):
        for number in range(rounds):
            for config in CONFIGS if number % 2 == 0 else tuple(reversed(CONFIGS)):
                command = [sys.executable, str(script), str(repository)]
                command += ["--traced", sink] if config == "on" else []
                tree = baseline if config == "baseline" else current
                done = subprocess.run(
                    command, env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True, text=True
                )
                if done.returncode != 0:
                    raise SystemExit(f"bench.tracing_handler failed in {tree}:\n{done.stderr[-2000:]}")
                figures[config].append(float(done.stdout.split()[-1]))
                print(
                    f"round {number + 1} handler {config:8} {figures[config][-1]:7.1f} us CPU per call",
                    flush=True,
                )
    print("\n| in-process ModelInfer | off / baseline | on (ratio 1.0) / baseline | on / off |")
    print("|---|---|---|---|")
    pairs = [(1, 0), (2, 0), (2, 1)]
    values = [[figures[c][n] for c in CONFIGS] for n in range(rounds)]
    print(f"| CPU per call | {' | '.join(ratio_cell([r[a] / r[b] for r in values]) for a, b in pairs)} |")
    return 0


def ratio_cell(ratios: list[float]) -> str:
    if not ratios:
        return "n/a"
    return f"{statistics.median(ratios):.3f}x [{min(ratios):.3f}-{max(ratios):.3f}]"


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    rev = args.baseline or before_tracing()
    protocols = [p for p in args.protocols.split(",") if p]
    with tempfile.TemporaryDirectory(prefix="conch-tracing-bench-") as folder:
        work = Path(folder)
        baseline = Path(rev) if Path(rev).is_dir() else unpack(rev, work / "baseline")
        current = (
            Path(args.current) if Path(args.current).is_dir() else unpack(args.current, work / "current")
        )
        repository = write_conch_repository(work / "models", [MODEL])
        if args.handler:
            return handler_rounds(args.rounds, repository, baseline, current)
        results: dict[tuple[str, str], list[tuple[LoadResult, ServerTimes]]] = {}
        with otlp_sink() as (sink, received):
            for number in range(args.rounds):
                chosen = [c for c in CONFIGS if c in args.configs.split(",")]
                order = chosen if number % 2 == 0 else list(reversed(chosen))
                for protocol in protocols:
                    for config in order:
                        tree = baseline if config == "baseline" else current
                        with server_for(config, repository, tree, sink, work / "logs", args.ratio) as server:
                            result, times = measure(server, protocol, args.clients, args.seconds, work)
                        results.setdefault((protocol, config), []).append((result, times))
                        print(
                            f"round {number + 1} {protocol} {config:8} {result.throughput:9.1f}/s "
                            f"p50 {result.p50_ms:6.2f} ms p99 {result.p99_ms:6.2f} ms "
                            f"server CPU {times.server_cpu_us or 0:6.1f} us/request {result.failure or ''}",
                            flush=True,
                        )
            exported = sum(received)
    print(
        f"\nbaseline: {rev}; current: {args.current}; {args.clients} clients, "
        f"{args.seconds:.0f} s points, {args.rounds} rounds"
    )
    print(f"the OTLP sink received {exported / 1e6:.1f} MB of spans from the 'on' servers\n")
    print(f"| protocol | figure | off / baseline | on (ratio {args.ratio}) / baseline | on / off |")
    print("|---|---|---|---|---|")
    for protocol in protocols:
        empty = [(LoadResult.failed("not run"), ServerTimes())] * args.rounds
        rounds = list(zip(*(results.get((protocol, c), empty) for c in CONFIGS), strict=True))
        for figure in ("requests/s", "server CPU us/request"):
            cells = []
            for a, b in ((1, 0), (2, 0), (2, 1)):
                # Each pair of servers from the same round, where both points count: perf_analyzer may
                # find no stable windows on a busy machine, while the CPU per request still holds.
                if figure == "requests/s":
                    pairs = [
                        (r[a][0].throughput, r[b][0].throughput) for r in rounds if r[a][0].ok and r[b][0].ok
                    ]
                else:
                    pairs = [(r[a][1].server_cpu_us, r[b][1].server_cpu_us) for r in rounds]
                cells.append(ratio_cell([x / y for x, y in pairs if x and y]))
            print(f"| {protocol} | {figure} | {' | '.join(cells)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
