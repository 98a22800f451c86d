"""``python -m bench.release_windows``: how alike a real server serves two identical versions in one
release step, window by window.

Why: the release gate compares the candidate's latency with the baseline's from the same window, so
any difference the server itself makes between two versions is noise the gate must tell from a
change. This holds one step (``--weight``, with or without shadow copies) on the model and clients of
:mod:`bench.release_gate_served`, with a candidate of the very same graph, and prints for each window
the clients' P95 ratio (candidate / baseline) and, per version, what the V2 statistics say: requests
(copies included), requests per execution, compute per execution and queue time per request.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.release_gate_served import (
    CLIENTS,
    LAYERS,
    MODEL,
    release_version_2,
    scoring_model,
    serve_version_1,
    uniform,
)
from tests.integration.load_traffic import Traffic
from tests.integration.server_process import ServerProcess

VERSIONS = (1, 2)


def statistics(server: ServerProcess) -> dict[int, dict[str, int]]:
    """Each version's cumulative requests, executions, compute and queue time (ns)."""
    found = {}
    for version in VERSIONS:
        reply = server.request("GET", f"/v2/models/{MODEL}/versions/{version}/stats")
        if reply.status != 200:
            continue
        stats = reply.json()["model_stats"][0]
        inference = stats["inference_stats"]
        found[version] = {
            "requests": inference["success"]["count"],
            "executions": stats["execution_count"],
            "compute_ns": inference["compute_infer"]["ns"],
            "queue_ns": inference["queue"]["ns"],
        }
    return found


def window(before: dict[int, dict[str, int]], after: dict[int, dict[str, int]], p95: dict[int, float]) -> str:
    """One window's line: the clients' P95 ratio, then each version's figures."""
    parts = [f"clients' P95 ratio {p95[2] / p95[1]:.2f}"]
    for version in VERSIONS:
        spent = {key: after[version][key] - before[version][key] for key in after[version]}
        executions = max(spent["executions"], 1)
        requests = max(spent["requests"], 1)
        # compute_infer is counted per request: a batch's time once for each request in it
        parts.append(
            f"v{version}: {spent['requests']} requests, {spent['requests'] / executions:.2f} a batch, "
            f"compute {spent['compute_ns'] / requests / 1e6:.2f} ms an execution, "
            f"queue {spent['queue_ns'] / requests / 1e6:.2f} ms, client P95 {p95[version] * 1e3:.1f} ms"
        )
    return " | ".join(parts)


def run(weight: int, shadow: bool, windows: int, seconds: float, scratch: Path) -> None:
    server = serve_version_1(scratch, LAYERS)
    traffic = Traffic(server, MODEL, uniform, clients=CLIENTS).start()
    try:
        time.sleep(5.0)
        step: dict[str, Any] = {"weight": weight, "duration": "1h", "shadow": shadow}
        release_version_2(server, [step, {"weight": 100}], scoring_model(2.0, LAYERS))
        time.sleep(8.0)
        before, started = statistics(server), time.monotonic()
        for number in range(windows):
            time.sleep(seconds)
            after, ended = statistics(server), time.monotonic()
            answered = [a for a in traffic.answers if started <= a.sent < ended]
            p95 = {
                version: float(np.percentile([a.seconds for a in answered if a.version == version], 95))
                for version in VERSIONS
            }
            print(f"window {number + 1}: {window(before, after, p95)}", flush=True)
            before, started = after, ended
    finally:
        traffic.finish()
        server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--weight", type=int, default=50, help="the candidate's share of clients, in %")
    parser.add_argument("--no-shadow", action="store_true", help="no shadow copies in the step")
    parser.add_argument("--windows", type=int, default=12)
    parser.add_argument("--seconds", type=float, default=5.0, help="the length of a window")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        run(args.weight, not args.no_shadow, args.windows, args.seconds, Path(scratch))
    return 0


if __name__ == "__main__":
    sys.exit(main())
