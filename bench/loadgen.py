"""The load generators: ``wrk`` for HTTP JSON, NVIDIA's ``perf_analyzer`` for gRPC, and their parsers.

Both run closed-loop at a fixed concurrency (connections or in-flight requests), one batch-1 request
each, on the same machine as the server. Every point returns a :class:`LoadResult`; a point that went
wrong (non-2xx answers, a load generator error) carries ``failure`` instead of being dropped.
"""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from bench.models import MODELS

SHARED_TOOLS = Path(__file__).resolve().parents[2] / "shared" / "tools"
# CONCH_PERF_ANALYZER names another build (the PyPI perf-analyzer's, say) on machines without ../shared.
PERF_ANALYZER = Path(os.environ.get("CONCH_PERF_ANALYZER") or SHARED_TOOLS / "perf_analyzer")

_WRK_SCRIPT = """\
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local file = assert(io.open("{body}", "rb"))
wrk.body = file:read("*a")
file:close()
"""
_WRK_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3}


@dataclass(frozen=True)
class LoadResult:
    """One measured point: inferences per second and latency percentiles in milliseconds.

    ``failure`` marks a point that does not count (errors answered); ``note`` one that counts with a
    caveat (perf_analyzer found no three windows in a row within its stability threshold).
    """

    throughput: float
    p50_ms: float
    p99_ms: float
    failure: str | None = None
    note: str | None = None

    @classmethod
    def failed(cls, reason: str) -> LoadResult:
        return cls(0.0, 0.0, 0.0, reason)

    @property
    def ok(self) -> bool:
        return self.failure is None


def infer_body(model: str, seed: int = 0) -> bytes:
    """A V2 JSON inference request: one row of random floats for ``model``'s ``INPUT0``."""
    width = MODELS[model][0]
    data = np.random.default_rng(seed).random(width, dtype=np.float32)
    request = {"inputs": [{"name": "INPUT0", "shape": [1, width], "datatype": "FP32", "data": data.tolist()}]}
    return json.dumps(request).encode()


def run_wrk(
    url: str,
    body_path: Path,
    concurrency: int,
    seconds: float,
    workdir: Path,
    headers: dict[str, str] | None = None,
    threads: int = 1,
) -> LoadResult:
    """``wrk -tT -cC -dNs --latency -s post.lua URL``, POSTing the file at ``body_path`` with
    ``headers`` besides its content type (an ``Authorization`` token, say).

    One thread (the default) keeps the load generator to one core on small machines; a server spread
    over many cores can outrun one wrk thread, so ``threads`` raises it there."""
    script = workdir / "post.lua"
    extra = "".join(f'wrk.headers["{name}"] = "{value}"\n' for name, value in (headers or {}).items())
    script.write_text(_WRK_SCRIPT.format(body=body_path) + extra)
    command = ["wrk", f"-t{max(1, min(threads, concurrency))}", f"-c{concurrency}"]
    command += [f"-d{max(1, round(seconds))}s", "--timeout", "10s"]
    command += ["--latency", "-s", str(script), url]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 60)
    except subprocess.TimeoutExpired:
        return LoadResult.failed("wrk did not finish")
    if done.returncode != 0:
        return LoadResult.failed(f"wrk exited {done.returncode}: {done.stderr.strip()[-200:]}")
    return parse_wrk(done.stdout)


def parse_wrk(output: str) -> LoadResult:
    """Requests/s and the 50 %/99 % latencies of ``wrk --latency``; non-2xx answers fail the run."""
    rate = re.search(r"^Requests/sec:\s+([\d.]+)", output, re.MULTILINE)
    percentiles = {
        int(pct): float(value) * _WRK_UNITS[unit]
        for pct, value, unit in re.findall(r"^\s+(\d+)%\s+([\d.]+)(us|ms|s|m)\s*$", output, re.MULTILINE)
    }
    if rate is None or 50 not in percentiles or 99 not in percentiles:
        return LoadResult.failed(f"unreadable wrk output: {output.strip()[-200:]}")
    result = LoadResult(float(rate.group(1)), percentiles[50], percentiles[99])
    non_2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", output)
    if non_2xx:
        return replace(result, failure=f"{non_2xx.group(1)} non-2xx answers")
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output)
    if errors and any(int(count) for count in errors.groups()):
        return replace(result, failure=errors.group(0))
    if result.throughput <= 0:
        return LoadResult.failed("no request completed")
    return result


@dataclass(frozen=True)
class PerfTarget:
    """What perf_analyzer drives: a model at ``address`` (``host:port``, no scheme) over ``protocol``
    (``grpc`` or ``http``; HTTP sends the tensors in the binary extension), ``INPUT0`` of ``width``."""

    model: str
    address: str
    protocol: str = "grpc"
    width: int | None = None

    @property
    def input_width(self) -> int:
        return self.width if self.width is not None else MODELS[self.model][0]


def run_perf_analyzer(
    model: str, grpc_address: str, concurrency: int, seconds: float, workdir: Path
) -> LoadResult:
    """``perf_analyzer -i grpc`` on a benchmark model, see :func:`perf_analyzer_point`."""
    return perf_analyzer_point(PerfTarget(model, grpc_address), concurrency, seconds, workdir)


def perf_analyzer_point(target: PerfTarget, concurrency: int, seconds: float, workdir: Path) -> LoadResult:
    """``perf_analyzer -i PROTOCOL --concurrency-range C`` with windows of ``seconds`` / 2.

    perf_analyzer repeats windows until three in a row agree within ``-s`` percent, else it exits 2
    without a report. On two shared cores its default 10 % rarely holds: 25 % within 6 windows first,
    then, failing that, any 3 windows (``-s 100``), the point noted "unstable".
    """
    result = _perf_analyzer(target, concurrency, seconds, workdir, stability=25, windows=6)
    if result.failure is not None and "stable measurement" in result.failure:
        result = _perf_analyzer(target, concurrency, seconds, workdir, stability=100, windows=3)
        return replace(result, note="unstable") if result.ok else result
    return result


def _perf_analyzer(
    target: PerfTarget, concurrency: int, seconds: float, workdir: Path, stability: int, windows: int
) -> LoadResult:
    report = workdir / f"pa-{target.model}-{target.protocol}-c{concurrency}.csv"
    report.unlink(missing_ok=True)
    command = [str(PERF_ANALYZER), "-m", target.model, "-u", target.address, "-i", target.protocol]
    command += ["--concurrency-range", str(concurrency), "-p", str(perf_analyzer_window_ms(seconds))]
    command += ["-s", str(stability), "-r", str(windows), "--shape", f"INPUT0:{target.input_width}"]
    command += ["-f", str(report)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=windows * seconds + 120)
    except subprocess.TimeoutExpired:
        return LoadResult.failed("perf_analyzer did not finish")
    if done.returncode != 0 or not report.exists():
        lines = [line.strip() for line in (done.stdout + done.stderr).splitlines() if line.strip()]
        return LoadResult.failed(f"perf_analyzer exited {done.returncode}: {lines[-1] if lines else ''}")
    return parse_perf_analyzer_csv(report.read_text())


def perf_analyzer_window_ms(seconds: float) -> int:
    """perf_analyzer's ``-p``: half the point's duration, at least 500 ms."""
    return max(500, int(seconds * 500))


def parse_perf_analyzer_csv(text: str) -> LoadResult:
    """Throughput and p50/p99 (reported in microseconds) from perf_analyzer's ``-f`` CSV."""
    rows = list(csv.DictReader(text.splitlines()))
    if not rows:
        return LoadResult.failed("empty perf_analyzer report")
    row = rows[-1]
    try:
        return LoadResult(
            float(row["Inferences/Second"]), float(row["p50 latency"]) / 1e3, float(row["p99 latency"]) / 1e3
        )
    except (KeyError, ValueError) as exc:
        return LoadResult.failed(f"unreadable perf_analyzer report: {exc}")
