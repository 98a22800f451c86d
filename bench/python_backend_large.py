"""``python -m bench.python_backend_large``: large tensors through a Python-backend model, conch and Triton.

The same ``model.py`` files on conch and Triton 2.51, both servers up at once, taking turns going
first each round, so every ratio pairs the two servers' figures of one round. Two loads:

- **1 MiB, one client**: ``large_python`` returns its 1 MiB FP32 input as its output, so the tensor
  crosses to the model process and back on each request. One ``tritonclient`` client (HTTP with
  binary tensors, then gRPC) sends ``--requests`` requests one after another, checking answers
  against what it sent; the figure is the total time.
- **An image at 8 clients**: ``image_python`` (``bench.python_backend_ab``'s: a 3x224x224 FP32 row,
  602 KB, in; each channel's mean out) under perf_analyzer at 8 clients for ``--image-seconds``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from bench.loadgen import PerfTarget, perf_analyzer_point
from bench.models import model_config
from bench.peers import serve_conch, serve_triton
from bench.python_backend_ab import IMAGE_MODEL, IMAGE_WIDTH
from bench.servers import ServerProcess

MODEL = "large_python"
IMAGE = "image_python"
IMAGE_CLIENTS = 8
#: 1 MiB of FP32.
WIDTH = (1 << 20) // 4
ECHO_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            tensor = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", tensor)]))
        return responses
"""
CONFIG = f"""name: "{MODEL}"
backend: "python"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {WIDTH} ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {WIDTH} ] }} ]
dynamic_batching {{ max_queue_delay_microseconds: 500 }}
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
"""


def write_repository(root: Path) -> Path:
    (root / MODEL / "1").mkdir(parents=True)
    (root / MODEL / "1" / "model.py").write_text(ECHO_MODEL)
    (root / MODEL / "config.pbtxt").write_text(CONFIG)
    (root / IMAGE / "1").mkdir(parents=True)
    (root / IMAGE / "1" / "model.py").write_text(IMAGE_MODEL)
    config = model_config(IMAGE, (IMAGE_WIDTH, 3), 'backend: "python"', max_batch_size=8)
    (root / IMAGE / "config.pbtxt").write_text(config)
    return root


def http_sender(server: ServerProcess) -> Callable[[np.ndarray], np.ndarray]:
    client = httpclient.InferenceServerClient(server.ports.http_address, network_timeout=60)

    def send(data: np.ndarray) -> np.ndarray:
        tensor = httpclient.InferInput("INPUT0", list(data.shape), "FP32")
        tensor.set_data_from_numpy(data, binary_data=True)
        wanted = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)]
        return client.infer(MODEL, [tensor], outputs=wanted).as_numpy("OUTPUT0")

    return send


def grpc_sender(server: ServerProcess) -> Callable[[np.ndarray], np.ndarray]:
    client = grpcclient.InferenceServerClient(server.ports.grpc_address)

    def send(data: np.ndarray) -> np.ndarray:
        tensor = grpcclient.InferInput("INPUT0", list(data.shape), "FP32")
        tensor.set_data_from_numpy(data)
        return client.infer(MODEL, [tensor]).as_numpy("OUTPUT0")

    return send


SENDERS = {"http": http_sender, "grpc": grpc_sender}


def total_seconds(send: Callable[[np.ndarray], np.ndarray], requests: int) -> float:
    """Seconds for ``requests`` requests in a row, each answer checked (a wrong one stops the bench)."""
    inputs = [np.random.default_rng(i).random((1, WIDTH), dtype=np.float32) for i in range(4)]
    for data in inputs:  # warm-up: the first call maps segments and builds the client's buffers
        send(data)
    started = time.perf_counter()
    for i in range(requests):
        data = inputs[i % len(inputs)]
        answer = send(data)
        if i % 97 == 0 and not np.array_equal(answer, data):
            raise AssertionError("a server answered another tensor than the one it was sent")
    return time.perf_counter() - started


def image_rate(server: ServerProcess, protocol: str, seconds: float, workdir: Path) -> float:
    """Inferences a second of ``image_python`` under perf_analyzer at 8 clients (0: the point failed)."""
    address = server.ports.grpc_address if protocol == "grpc" else server.ports.http_address
    target = PerfTarget(IMAGE, address, protocol, IMAGE_WIDTH)
    result = perf_analyzer_point(target, IMAGE_CLIENTS, seconds, workdir)
    if not result.ok:
        print(f"{server.name} {protocol}: image point failed: {result.failure}")
    return result.throughput


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.python_backend_large", description=__doc__)
    parser.add_argument("--requests", type=int, default=3000, help="requests per server, protocol, round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--protocols", default="http,grpc")
    parser.add_argument("--image-seconds", type=float, default=10.0, help="0: no image load")
    args = parser.parse_args()
    protocols = args.protocols.split(",")
    with tempfile.TemporaryDirectory() as scratch:
        workdir = Path(scratch)
        repository = write_repository(workdir / "repo")
        servers = {
            "conch": serve_conch(repository, workdir / "conch"),
            "triton": serve_triton(repository, workdir / "triton"),
        }
        times: dict[tuple[str, str], list[float]] = {(s, p): [] for s in servers for p in protocols}
        rates: dict[tuple[str, str], list[float]] = {(s, p): [] for s in servers for p in protocols}
        for server in servers.values():
            server.start()
        try:
            for round_ in range(args.rounds):
                order = list(servers) if round_ % 2 == 0 else list(reversed(servers))
                for protocol in protocols:
                    for name in order:
                        seconds = total_seconds(SENDERS[protocol](servers[name]), args.requests)
                        times[name, protocol].append(seconds)
                        per = seconds / args.requests * 1000
                        print(f"round {round_} {protocol} {name}: {seconds:.2f} s ({per:.3f} ms a request)")
                    if args.image_seconds > 0:
                        for name in order:
                            rate = image_rate(servers[name], protocol, args.image_seconds, workdir)
                            rates[name, protocol].append(rate)
                            print(f"round {round_} {protocol} {name}: image {rate:,.1f}/s")
        finally:
            for server in servers.values():
                server.stop()
    print(f"\n{args.requests} requests of 1 MiB, one client, total time conch / Triton (lower is faster):")
    for protocol in protocols:
        ratios = [c / t for c, t in zip(times["conch", protocol], times["triton", protocol], strict=True)]
        print(
            f"{protocol}: per round {', '.join(f'{r:.2f}x' for r in ratios)}; "
            f"median {statistics.median(ratios):.2f}x, worst {max(ratios):.2f}x"
        )
    if args.image_seconds > 0:
        print(f"\nimage at {IMAGE_CLIENTS} clients, throughput conch / Triton (higher is faster):")
        for protocol in protocols:
            pairs = zip(rates["conch", protocol], rates["triton", protocol], strict=True)
            ratios = [c / t if t else 0.0 for c, t in pairs]
            print(
                f"{protocol}: per round {', '.join(f'{r:.2f}x' for r in ratios)}; "
                f"median {statistics.median(ratios):.2f}x, worst {min(ratios):.2f}x"
            )


if __name__ == "__main__":
    main()
