"""``python -m bench.memory_growth``: does conch's memory stay flat over 100,000 requests?

Why: a server that grows a few bytes per request is restarted by the OOM killer after a few days of
traffic, and no short benchmark notices. Triton's ``L0_memory_growth`` sends a long stream of requests
and watches the server's memory; this does the same to conch: HTTP JSON, HTTP binary tensors, gRPC, and
refused requests (unknown model, malformed JSON, a wrong shape) mixed in a fixed rotation from a few
client threads, while the resident set (RSS) of the server and its children is sampled. The growth is
the last sample against the first one after warm-up (and the highest one against it), the target under
20 MB. The curve is written as a PNG chart beside the report.
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import psutil

from bench.models import MODELS, write_conch_repository
from bench.peers import serve_conch
from bench.run import RESULTS, conch_revision, describe_machine, write_report
from bench.servers import ServerProcess

MODEL = "tiny"
TARGET_MB = 20.0
#: One cycle of the rotation: what each client thread sends, in order.
ROTATION = ("json", "binary", "grpc", "json", "binary", "grpc", "json", "grpc", "error_http", "error_grpc")


@dataclass
class Sampling:
    """RSS samples (requests sent so far, MiB) and the answers counted by kind and outcome."""

    samples: list[tuple[int, float]] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)
    sent: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def tree_rss_mib(pid: int) -> float:
    """Resident memory of the process and its children (model processes), in MiB."""
    root = psutil.Process(pid)
    total = root.memory_info().rss
    for child in root.children(recursive=True):
        try:
            total += child.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return total / 2**20


def senders(server: ServerProcess) -> dict[str, Callable[[int], str]]:
    """One function per kind of request; each sends one and says how it was answered."""
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    width = MODELS[MODEL][0]
    data = np.random.default_rng(0).random((1, width), dtype=np.float32)
    body = json.dumps(
        {
            "inputs": [
                {"name": "INPUT0", "shape": [1, width], "datatype": "FP32", "data": data.ravel().tolist()}
            ]
        }
    ).encode()
    connection = http.client.HTTPConnection("127.0.0.1", server.ports.http, timeout=30)
    http_client = httpclient.InferenceServerClient(server.ports.http_address)
    grpc_client = grpcclient.InferenceServerClient(server.ports.grpc_address)
    binary_input = httpclient.InferInput("INPUT0", [1, width], "FP32")
    binary_input.set_data_from_numpy(data, binary_data=True)
    grpc_input = grpcclient.InferInput("INPUT0", [1, width], "FP32")
    grpc_input.set_data_from_numpy(data)
    bad_bodies = [b'{"inputs": [', body.replace(b'"shape": [1, 16]', b'"shape": [1, 3]'), body]
    errors = {"n": 0}

    def post(path: str, payload: bytes) -> int:
        try:
            connection.request("POST", path, payload, {"Content-Type": "application/json"})
            answer = connection.getresponse()
            answer.read()
        except (OSError, http.client.HTTPException):
            connection.close()  # the next request opens a new connection
            raise
        if answer.will_close:
            connection.close()
        return answer.status

    def json_request(_: int) -> str:
        return f"json {post(f'/v2/models/{MODEL}/infer', body)}"

    def binary_request(_: int) -> str:
        http_client.infer(MODEL, [binary_input])
        return "binary ok"

    def grpc_request(_: int) -> str:
        grpc_client.infer(MODEL, [grpc_input])
        return "grpc ok"

    def error_http(_: int) -> str:
        errors["n"] += 1
        kind = errors["n"] % 3
        path = f"/v2/models/{MODEL}/infer" if kind < 2 else "/v2/models/no-such-model/infer"
        return f"error_http {post(path, bad_bodies[kind])}"

    def error_grpc(_: int) -> str:
        try:
            grpc_client.infer("no-such-model", [grpc_input])
        except InferenceServerException as exc:
            return f"error_grpc {exc.status()}"
        return "error_grpc answered"

    return {
        "json": json_request,
        "binary": binary_request,
        "grpc": grpc_request,
        "error_http": error_http,
        "error_grpc": error_grpc,
    }


def drive(server: ServerProcess, total: int, threads: int, sample_every: int) -> Sampling:
    """``total`` requests from ``threads`` client threads; an RSS sample every ``sample_every``."""
    assert server.process is not None
    pid = server.process.pid
    sampling = Sampling(samples=[(0, tree_rss_mib(pid))])
    per_thread = total // threads

    def client() -> None:
        send = senders(server)
        for index in range(per_thread):
            kind = ROTATION[index % len(ROTATION)]
            try:
                outcome = send[kind](index)
            except Exception as exc:  # a failed request is counted, never fatal to the run
                outcome = f"{kind} failed: {type(exc).__name__}"
            with sampling.lock:
                sampling.outcomes[outcome] += 1
                sampling.sent += 1
                if sampling.sent % sample_every == 0:
                    sampling.samples.append((sampling.sent, tree_rss_mib(pid)))

    workers = [threading.Thread(target=client, daemon=True) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    sampling.samples.append((sampling.sent, tree_rss_mib(pid)))
    return sampling


@dataclass(frozen=True)
class Growth:
    warm_mib: float
    last_mib: float
    peak_mib: float

    @property
    def growth_mb(self) -> float:
        return (self.last_mib - self.warm_mib) * 2**20 / 1e6

    @property
    def peak_growth_mb(self) -> float:
        return (self.peak_mib - self.warm_mib) * 2**20 / 1e6


def growth(samples: Sequence[tuple[int, float]], warmup: int) -> Growth:
    """The first sample at or after ``warmup`` requests against the last and the highest after it."""
    after = [(sent, rss) for sent, rss in samples if sent >= warmup]
    if not after:
        raise ValueError(f"no sample after the {warmup:,} warm-up requests")
    return Growth(after[0][1], after[-1][1], max(rss for _, rss in after))


def write_chart(samples: Sequence[tuple[int, float]], warmup: int, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    figure, axes = plt.subplots(figsize=(8, 4.5))
    xs, ys = zip(*samples, strict=True)
    axes.plot(xs, ys, "-", linewidth=1.2)
    axes.axvline(warmup, color="grey", linestyle="--", linewidth=0.8, label=f"end of warm-up ({warmup:,})")
    axes.set_xlabel("requests sent")
    axes.set_ylabel("RSS of server + children, MiB")
    axes.set_title("conch memory over mixed traffic")
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return True


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.memory_growth", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--requests", type=int, default=100_000, help="requests in all (default 100,000)")
    parser.add_argument("--warmup", type=int, default=10_000, help="requests before the baseline sample")
    parser.add_argument("--threads", type=int, default=4, help="client threads (default 4)")
    parser.add_argument("--sample-every", type=int, default=1_000, help="requests between RSS samples")
    parser.add_argument("--conch-args", default="", help="extra `conch serve` flags, space-separated")
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if not 0 <= args.warmup < args.requests or args.threads < 1 or args.sample_every < 1:
        parser.error("need 0 <= --warmup < --requests, --threads >= 1 and --sample-every >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = datetime.now(UTC)
    machine = describe_machine()
    with tempfile.TemporaryDirectory(prefix="conch-bench-memory-") as folder:
        repository = write_conch_repository(Path(folder) / "repo", [MODEL])
        begun = time.monotonic()
        with serve_conch(repository, Path(folder), extra=args.conch_args.split()) as server:
            sampling = drive(server, args.requests, args.threads, args.sample_every)
        seconds = time.monotonic() - begun
    found = growth(sampling.samples, args.warmup)
    stem = started.strftime("%Y-%m-%d-%H%M%S") + "-memory"
    args.results_dir.mkdir(parents=True, exist_ok=True)
    chart = args.results_dir / f"{stem}.png"
    charted = write_chart(sampling.samples, args.warmup, chart)
    verdict = "met" if found.growth_mb < TARGET_MB and found.peak_growth_mb < TARGET_MB else "NOT met"
    lines = [
        f"# Memory over {sampling.sent:,} mixed requests, {started.strftime('%Y-%m-%d %H:%M UTC')}\n",
        f"**Growth after warm-up: {found.growth_mb:+.1f} MB (last sample), {found.peak_growth_mb:+.1f} MB "
        f"(highest sample); target under {TARGET_MB:g} MB: {verdict}.**\n",
        f"RSS of the server and its children: {found.warm_mib:.1f} MiB after {args.warmup:,} requests, "
        f"{found.last_mib:.1f} MiB at the end, {found.peak_mib:.1f} MiB at the highest; "
        f"{sampling.sent / seconds:,.0f} requests/s over {seconds:.0f} s.\n",
        f"![RSS over requests]({chart.name})\n" if charted else "(matplotlib missing: no chart)\n",
        "## Answers\n",
        "| kind and answer | count |",
        "|---|---|",
        *(f"| {outcome} | {count:,} |" for outcome, count in sorted(sampling.outcomes.items())),
        "\n## Samples (requests sent, MiB)\n",
        ", ".join(
            f"{sent:,}: {rss:.1f}" for sent, rss in sampling.samples[:: max(1, len(sampling.samples) // 25)]
        ),
        "\n## Machine\n",
        *(f"- {line}" for line in machine),
        f"- conch {conch_revision()}",
        "\n## Method\n",
        f"- `conch serve {args.conch_args or '(default flags)'}` on the `{MODEL}` MLP "
        f"({' -> '.join(map(str, MODELS[MODEL]))}); {args.threads} client "
        f"threads, each sending in rotation: {', '.join(ROTATION)}",
        "- json: a V2 JSON body over a kept-alive HTTP connection; binary: tritonclient.http with binary "
        "tensors; grpc: tritonclient.grpc; error_http: in turn malformed JSON (400), a wrong shape (400), an "
        "unknown model (404); error_grpc: an unknown model (NOT_FOUND)",
        f"- RSS (psutil) of the server process and its children every {args.sample_every:,} requests",
    ]
    write_report("\n".join(lines) + "\n", args.results_dir, f"{stem}.md", "bench.memory_growth")
    return 0 if verdict == "met" else 1


if __name__ == "__main__":
    sys.exit(main())
