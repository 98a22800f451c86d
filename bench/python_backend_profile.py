"""``python -m bench.python_backend_profile``: where a Python-backend request's CPU goes in conch.

One ``conch serve`` holds ``NAME_python`` for each ``--models`` ONNX file (``peer_code/triton_model.py``,
ONNX Runtime inside ``execute``, the model ``bench.python_backend`` runs on conch and Triton).
perf_analyzer drives it at ``--concurrency`` clients over each ``--protocols`` while ``py-spy`` samples
the server and its model process (``--subprocesses``; ``pip install py-spy``, in the bench extra).
Every sample's innermost frame that belongs to an area is counted there: the frontend's decode and
encode (gRPC or HTTP), the request path and scheduler, the message to the model process and its
framing, the event loop, and in the model process the stub around ``execute``, the model's own
``execute`` and ONNX Runtime. Samples over the requests served give each area's CPU per request.

Writes ``bench/results/<timestamp>-python-backend-profile.md`` and prints it.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from bench.loadgen import PerfTarget, perf_analyzer_point
from bench.models import MODELS
from bench.models import write_python_backend_repository as write_repository
from bench.peers import serve_conch
from bench.py_spy import count_samples, sampled
from bench.report import publish

RESULTS = Path("bench/results")
RATE = 200  # py-spy samples a second of each busy thread
#: (area, marks in a frame's file or function), first match wins, innermost frame first.
AREAS = (
    ("model process: ONNX Runtime", ("onnxruntime",)),
    ("model process: the model's execute", ("/1/model.py", "triton_model.py")),  # a version folder's file
    ("model process: stub around execute", ("backends/python/stub", "triton_python_backend_utils")),
    ("message to the model process, framing, wake-up", ("backends/python", "conch_ipc", "shared_memory")),
    ("gRPC frontend: decode and encode", ("frontends/grpc", "grpc/", "google/protobuf", "tritonclient")),
    ("HTTP frontend: decode and encode", ("frontends/http", "http_server", "httptools", "h11")),
    ("request path and scheduler", ("conch/server.py", "conch/router", "conch/scheduling", "conch/models")),
    ("event loop", ("asyncio", "uvloop", "selectors")),
)


def profile_point(server_pid: int, target: PerfTarget, concurrency: int, seconds: float, work: Path) -> dict:
    """perf_analyzer at ``concurrency`` while py-spy samples the server's process tree."""
    perf_analyzer_point(target, concurrency, 3.0, work)  # warm the model and the connections
    results = []
    raw = sampled(
        server_pid,
        work / f"{target.model}-{target.protocol}.txt",
        RATE,
        lambda: results.append(perf_analyzer_point(target, concurrency, seconds, work)),
        children=True,
    )
    areas, functions, total = count_samples(raw, AREAS)
    return {"load": results[0], "areas": areas, "functions": functions, "total": total, "seconds": seconds}


def render(points: dict[tuple[str, str], dict], args: argparse.Namespace, top: int) -> str:
    lines = [
        f"# Where a Python-backend request's CPU goes in conch, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        "",
        f"`python -m bench.python_backend_profile --models {' '.join(args.models)} --protocols "
        f"{' '.join(args.protocols)} --concurrency {args.concurrency} --seconds {args.seconds}`: one "
        f"`conch serve` with `NAME_python` (`bench/peer_code/triton_model.py`: ONNX Runtime inside "
        f"`execute`; `max_batch_size: 64`, 500 us queue delay, one instance), perf_analyzer at "
        f"{args.concurrency} clients, py-spy sampling the server and its model process {RATE} times a "
        f"second (busy threads only); load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores. "
        "CPU per request is an area's samples / rate / requests served while sampled.",
        "",
    ]
    names = [area for area, _ in AREAS] + ["other"]
    heads = [f"{model} {protocol}" for model, protocol in points]
    lines += ["| area | " + " | ".join(heads) + " |", "|---|" + "---|" * len(heads)]
    for area in names:
        cells = []
        for point in points.values():
            requests = point["load"].throughput * point["seconds"]
            per_request_us = point["areas"][area] / RATE / max(requests, 1) * 1e6
            cells.append(f"{per_request_us:.0f} us ({point['areas'][area] / point['total']:.0%})")
        lines.append(f"| {area} | " + " | ".join(cells) + " |")
    totals = []
    for point in points.values():
        requests = point["load"].throughput * point["seconds"]
        totals.append(f"**{point['total'] / RATE / max(requests, 1) * 1e6:.0f} us**")
    lines.append("| all CPU per request | " + " | ".join(totals) + " |")
    throughput = [
        f"{p['load'].throughput:,.0f}/s" + (" (unstable)" if p["load"].note else "") for p in points.values()
    ]
    lines.append("| requests served | " + " | ".join(throughput) + " |")
    for (model, protocol), point in points.items():
        lines += ["", f"## {model} over {protocol}: innermost functions, top {top}", ""]
        lines += ["| function | share |", "|---|---|"]
        lines += [
            f"| `{name}` | {count / point['total']:.1%} |"
            for name, count in point["functions"].most_common(top)
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["tiny", "mlp"], choices=sorted(MODELS))
    parser.add_argument("--protocols", nargs="+", default=["grpc", "http"], choices=["grpc", "http"])
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=10.0, help="sampled seconds of each point")
    parser.add_argument("--top", type=int, default=15, help="functions listed per point")
    args = parser.parse_args(argv)
    points: dict[tuple[str, str], dict] = {}
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        repository = write_repository(work / "models", args.models, onnx_callee=False)
        with serve_conch(repository, work) as server:
            assert server.process is not None
            for model in args.models:
                for protocol in args.protocols:
                    address = server.ports.grpc_address if protocol == "grpc" else server.ports.http_address
                    target = PerfTarget(f"{model}_python", address, protocol, MODELS[model][0])
                    points[(model, protocol)] = profile_point(
                        server.process.pid, target, args.concurrency, args.seconds, work
                    )
    text = render(points, args, args.top)
    publish(text, "python-backend-profile", RESULTS)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
