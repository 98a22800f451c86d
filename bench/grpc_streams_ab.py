"""``python -m bench.grpc_streams_ab``: gRPC calls/s with and without a cap on streams per connection.

tritonclient and perf_analyzer multiplex a client's calls on few HTTP/2 connections, so a cap on
concurrent streams per connection (``--grpc-max-concurrent-streams``) below the clients a channel
carries would queue calls in the client. One ``conch serve`` per variant (``--variants``, stream caps;
0 is gRPC's own: no cap) serves the bench model (``--model``, ``tiny``), all up at once; each round
takes each concurrency's point on every variant, one after another, the order turning each round, so
a pair is seconds apart on this shared machine; each point also gives the server's CPU a call (as
``bench.grpc_cpu_ab`` counts it), steadier than calls/s there. Also prints how many TCP connections
perf_analyzer opened at each concurrency (``ss``), which says how many calls each connection carried.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from bench.grpc_cpu_ab import _calls, _cpu_s
from bench.loadgen import PerfTarget, perf_analyzer_point
from bench.models import MODELS, write_conch_repository


def start(repository: Path, first_port: int, streams: int) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "conch.cli.main", "serve", str(repository), "--host", "127.0.0.1"]
    command += ["--http-port", str(first_port), "--grpc-port", str(first_port + 1)]
    command += ["--metrics-port", str(first_port + 2), "--grpc-max-concurrent-streams", str(streams)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{first_port}/v2/health/ready", timeout=2):
                return server
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                raise RuntimeError(f"conch serve with {streams} streams did not start") from None
            time.sleep(0.3)


def connections(port: int) -> int:
    """Established TCP connections to ``port`` on this host right now."""
    done = subprocess.run(
        ["ss", "-Htn", "state", "established", f"( sport = :{port} )"], capture_output=True, text=True
    )
    return len(done.stdout.splitlines())


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.grpc_streams_ab", description=__doc__)
    parser.add_argument("--variants", default="1024,0", help="stream caps, one server each (1024,0)")
    parser.add_argument("--concurrencies", default="32,256")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=4.0, help="perf_analyzer windows are half of it")
    parser.add_argument("--model", default="tiny", choices=sorted(MODELS))
    parser.add_argument("--port", type=int, default=18300, help="first of three ports per variant")
    args = parser.parse_args()
    variants = [int(each) for each in args.variants.split(",")]
    concurrencies = [int(each) for each in args.concurrencies.split(",")]
    results: dict[tuple[int, int], list[float]] = {(v, c): [] for v in variants for c in concurrencies}
    by_round: dict[tuple[int, int, int], float] = {}
    cpu_us: dict[tuple[int, int], list[float]] = {key: [] for key in results}
    seen: dict[int, int] = {}
    with tempfile.TemporaryDirectory() as scratch:
        workdir = Path(scratch)
        repository = write_conch_repository(workdir / "repo", [args.model])
        servers = {v: start(repository, args.port + 3 * i, v) for i, v in enumerate(variants)}
        try:
            for v, c in results:  # warm-up: the batcher, the acceptors, perf_analyzer's first start
                address = f"127.0.0.1:{args.port + 3 * variants.index(v) + 1}"
                perf_analyzer_point(PerfTarget(args.model, address), c, 2.0, workdir)
            for round_ in range(args.rounds):
                order = variants if round_ % 2 == 0 else list(reversed(variants))
                for c in concurrencies:
                    for v in order:
                        port = args.port + 3 * variants.index(v) + 1
                        sample = threading.Timer(
                            args.seconds, lambda p=port, c=c: seen.update({c: connections(p)})
                        )
                        sample.start()
                        server = servers[v]
                        cpu, calls = _cpu_s(server.pid), _calls(port + 1, args.model)
                        point = perf_analyzer_point(
                            PerfTarget(args.model, f"127.0.0.1:{port}"), c, args.seconds, workdir
                        )
                        cpu, calls = _cpu_s(server.pid) - cpu, _calls(port + 1, args.model) - calls
                        sample.cancel()
                        cpu_us[(v, c)].append(cpu / calls * 1e6 if calls else 0.0)
                        if point.ok:  # a failed point (no three windows at all) is printed, not counted
                            results[(v, c)].append(point.throughput)
                            by_round[(v, c, round_)] = point.throughput
                        note = point.failure or point.note or ""
                        print(f"round {round_} c={c} streams={v}: {point.throughput:,.0f}/s "
                              f"p50 {point.p50_ms:.2f} ms, {cpu_us[(v, c)][-1]:.0f} us server CPU a call "
                              f"{note}", flush=True)  # fmt: skip
        finally:
            for server in servers.values():
                server.terminate()
                server.wait(15)
    for (v, c), rates in results.items():
        if not rates:
            print(f"c={c} streams={v or 'no cap'}: no point measured")
            continue
        median, worst, best = statistics.median(rates), min(rates), max(rates)
        cap = v or "no cap"
        print(
            f"c={c} streams={cap}: median {median:,.0f}/s, worst {worst:,.0f}, best {best:,.0f} "
            f"({len(rates)} rounds); server CPU a call median {statistics.median(cpu_us[(v, c)]):.0f} us"
        )
    first = variants[0]
    for v in variants[1:]:
        for c in concurrencies:
            pairs = [
                by_round[(first, c, r)] / by_round[(v, c, r)]
                for r in range(args.rounds)
                if (first, c, r) in by_round and (v, c, r) in by_round
            ]
            if pairs:
                print(
                    f"c={c}: streams={first} / streams={v or 'no cap'} in the same round: median "
                    f"{statistics.median(pairs):.2f}x, worst {min(pairs):.2f}x ({len(pairs)} pairs)"
                )
    for c, count in sorted(seen.items()):
        print(f"c={c}: perf_analyzer held {count} TCP connection(s) to the server")


if __name__ == "__main__":
    main()
