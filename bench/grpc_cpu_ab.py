"""``python -m bench.grpc_cpu_ab BASE NEW``: server CPU per gRPC ModelInfer call in two trees, A/B.

``--protocol http_json`` measures HTTP JSON inference requests instead, sent by wrk with the sweep's
body (one row of the model, ``tiny`` unless ``--model``), as ``bench.sweep`` sends them.

Why CPU per call rather than calls/s alone: on a shared 2-core machine, calls/s follows whatever else
runs; the server's utime+stime (``/proc/PID/stat``) over the calls it answered
(``nv_inference_request_success``) moves much less. Each round starts ``conch serve`` from each tree on
the model (``--model``, ``tiny`` by default), warms it with perf_analyzer, then measures one
perf_analyzer run at 32 clients (perf_analyzer's shapes as ``bench.loadgen`` gives them). The trees
take turns going first, so that neither always meets the machine as the other left it. Prints each
round, then medians and worsts.

``--serve-args "--proxies 2"`` passes flags to both servers; the CPU counted is then the model
process's and its proxy processes' together (its children), per call.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from bench import loadgen
from bench.loadgen import PERF_ANALYZER
from bench.models import MODELS, write_conch_repository

_TICKS = os.sysconf("SC_CLK_TCK")


def _success(model: str) -> re.Pattern[str]:
    return re.compile(rf'^nv_inference_request_success\{{model="{model}",version="1"\}} (\S+)', re.M)


def _cpu_s(pid: int) -> float:
    """CPU seconds of ``pid`` and of its children alive now (the proxy processes of ``--proxies``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return (int(fields[11]) + int(fields[12])) / _TICKS + sum(_cpu_s(int(child)) for child in children)


def _calls(metrics_port: int, model: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as answer:
        found = _success(model).search(answer.read().decode())
    if found is None:
        raise RuntimeError(f"the server's metrics have no success count for '{model}'")
    return float(found.group(1))


def _perf_analyzer(grpc_port: int, window_ms: int, workdir: Path, model: str, width: int) -> float | None:
    """Calls/s at 32 clients over three windows (``-s 100``: any three, a shared machine rarely agrees);
    None when perf_analyzer found no stable window even so (its latencies vary too, on a busy machine)."""
    report = workdir / f"pa-{grpc_port}.csv"
    command = [str(PERF_ANALYZER), "-m", model, "-u", f"127.0.0.1:{grpc_port}", "-i", "grpc"]
    command += ["--concurrency-range", "32", "-p", str(window_ms), "-s", "100", "-r", "3"]
    command += ["--shape", f"INPUT0:{width}", "-f", str(report)]
    report.unlink(missing_ok=True)  # a run that fails must not leave the last run's figure to read
    subprocess.run(command, capture_output=True, timeout=120, check=False)
    if not report.exists():
        return None
    with report.open() as rows:
        return float(next(csv.DictReader(rows))["Inferences/Second"])


def _wrk(http_port: int, seconds: float, workdir: Path, model: str) -> float:
    """Requests/s of 32 wrk connections POSTing ``model``'s JSON body."""
    body = workdir / f"{model}.json"
    if not body.exists():
        body.write_bytes(loadgen.infer_body(model))
    url = f"http://127.0.0.1:{http_port}/v2/models/{model}/infer"
    result = loadgen.run_wrk(url, body, 32, seconds, workdir)
    if not result.ok:
        raise RuntimeError(f"wrk failed: {result.failure}")
    return result.throughput


def measure(
    tree: Path,
    repository: Path,
    first_port: int,
    workdir: Path,
    protocol: str = "grpc",
    serve_args: Sequence[str] = (),
    model: str = "tiny",
    width: int | None = None,
) -> tuple[float, float]:
    """(microseconds of server CPU per call, calls/s) of ``conch serve`` run from ``tree``; ``width``:
    the model's INPUT0 row width when ``model`` is not one of ``bench.models``' (a Python model's)."""
    http, grpc_port, metrics = first_port, first_port + 1, first_port + 2
    command = [sys.executable, "-m", "conch.cli.main", "serve", str(repository), "--host", "127.0.0.1"]
    command += ["--http-port", str(http), "--grpc-port", str(grpc_port), "--metrics-port", str(metrics)]
    command += serve_args
    server = subprocess.Popen(command, cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                _calls(metrics, model)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

        def load(seconds: float) -> float | None:
            if protocol == "http_json":
                return _wrk(http, seconds, workdir, model)
            return _perf_analyzer(grpc_port, round(seconds * 1000), workdir, model, width or MODELS[model][0])

        load(1.0)  # warm-up: the batcher and the acceptors settle
        cpu, calls, started = _cpu_s(server.pid), _calls(metrics, model), time.monotonic()
        # perf_analyzer measures three 3 s windows; wrk one stretch, as long as those windows together.
        throughput = load(3.0 if protocol == "grpc" else 9.0)
        elapsed = time.monotonic() - started
        cpu, calls = _cpu_s(server.pid) - cpu, _calls(metrics, model) - calls
        # Without a stable window from perf_analyzer: the calls the server counted over the load.
        return cpu / calls * 1e6, throughput if throughput is not None else calls / elapsed
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.grpc_cpu_ab", description=__doc__)
    parser.add_argument("base", type=Path, help="the tree to compare against (a git worktree, say)")
    parser.add_argument("new", type=Path)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--protocol", choices=["grpc", "http_json"], default="grpc")
    parser.add_argument("--port", type=int, default=18110, help="first of the six ports used")
    parser.add_argument("--serve-args", default="", help='flags for both servers, "--proxies 2" say')
    parser.add_argument("--model", default="tiny", choices=sorted(MODELS), help="a bench model (tiny)")
    args = parser.parse_args()
    trees = {"base": args.base.resolve(), "new": args.new.resolve()}
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in trees}
    with tempfile.TemporaryDirectory() as scratch:
        workdir = Path(scratch)
        repository = workdir / "repo"
        write_conch_repository(repository, [args.model])
        for round_ in range(args.rounds):
            order = list(trees) if round_ % 2 == 0 else list(reversed(trees))
            for name in order:
                port = args.port if name == "base" else args.port + 3
                serve_args = shlex.split(args.serve_args)
                cost, throughput = measure(
                    trees[name], repository, port, workdir, args.protocol, serve_args, args.model
                )
                results[name].append((cost, throughput))
                print(f"round {round_} {name}: {cost:.1f} us CPU/call, {throughput:,.0f} calls/s", flush=True)
    for name, rows in results.items():
        us = [u for u, _ in rows]
        rates = [t for _, t in rows]
        print(
            f"{name}: CPU/call median {statistics.median(us):.1f} us, worst {max(us):.1f}; "
            f"calls/s median {statistics.median(rates):,.0f}, worst {min(rates):,.0f}"
        )


if __name__ == "__main__":
    main()
