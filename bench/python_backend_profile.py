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
import collections
import os
import subprocess
import sys
import tempfile
import threading
from datetime import UTC, datetime
from pathlib import Path

from bench.loadgen import PerfTarget, perf_analyzer_point
from bench.models import MODELS
from bench.models import write_python_backend_repository as write_repository
from bench.peers import serve_conch

RESULTS = Path("bench/results")
RATE = 200  # py-spy samples a second of each busy thread
#: (area, marks in a frame's file or function), first match wins, innermost frame first.
AREAS = (
    ("model process: ONNX Runtime", ("onnxruntime",)),
    ("model process: the model's execute", ("triton_model.py", "peer_code")),
    ("model process: stub around execute", ("backends/python/stub", "triton_python_backend_utils")),
    ("message to the model process, framing, wake-up", ("backends/python", "conch_ipc", "shared_memory")),
    ("gRPC frontend: decode and encode", ("frontends/grpc", "grpc/", "google/protobuf", "tritonclient")),
    ("HTTP frontend: decode and encode", ("frontends/http", "http_server", "httptools", "h11")),
    ("request path and scheduler", ("conch/server.py", "conch/router", "conch/scheduling", "conch/models")),
    ("event loop", ("asyncio", "uvloop", "selectors")),
)


def area_of(stack: list[str]) -> str:
    for frame in reversed(stack):
        for area, marks in AREAS:
            if any(mark in frame for mark in marks):
                return area
    return "other"


def samples(raw: str) -> tuple[collections.Counter[str], collections.Counter[str], int]:
    """Samples by area and by innermost function, from py-spy's raw output."""
    areas: collections.Counter[str] = collections.Counter()
    functions: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.splitlines():
        stack_text, _, count_text = line.rpartition(" ")
        if not stack_text or not count_text.isdigit():
            continue
        stack = stack_text.split(";")
        total += int(count_text)
        areas[area_of(stack)] += int(count_text)
        functions[stack[-1]] += int(count_text)
    return areas, functions, total


def profile_point(server_pid: int, target: PerfTarget, concurrency: int, seconds: float, work: Path) -> dict:
    """perf_analyzer at ``concurrency`` while py-spy samples the server's process tree."""
    perf_analyzer_point(target, concurrency, 3.0, work)  # warm the model and the connections
    raw_path = work / f"{target.model}-{target.protocol}.txt"
    spy = subprocess.Popen(
        [str(Path(sys.executable).parent / "py-spy"), "record", "--format", "raw", "--rate", str(RATE),
         "--nonblocking", "--subprocesses", "--pid", str(server_pid), "--output", str(raw_path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    results = []
    load = threading.Thread(
        target=lambda: results.append(perf_analyzer_point(target, concurrency, seconds, work))
    )
    load.start()
    load.join()
    spy.send_signal(2)  # SIGINT: py-spy writes what it sampled and exits
    _, errors = spy.communicate(timeout=60)
    raw = raw_path.read_text() if raw_path.exists() else ""
    if not raw:
        raise RuntimeError(f"py-spy wrote no samples: {errors.strip()[-500:]}")
    areas, functions, total = samples(raw)
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
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{datetime.now(UTC):%Y-%m-%d-%H%M%S}-python-backend-profile.md"
    path.write_text(text)
    print(text)
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
