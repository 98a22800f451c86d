"""ResNet-50 through conch against the raw limit of torch alone, measured in the same run.

``python -m bench.pytorch_gpu`` (options: ``--help``). On a machine with CUDA:

- raw limit: torch in this process, fp16 weights in channels-last, batch 128; each step copies a
  float32 batch from pinned memory to the GPU, casts it, runs the network and copies the float32
  logits back: what a server has to do at the least;
- conch: the same network saved as TorchScript in a repository (``precision: fp16``,
  ``memory_format: channels_last``, ``--instances`` KIND_GPU instances), served by ``conch serve``;
  ``--clients`` threads each send batches of 128 over gRPC, inputs and outputs in system shared
  memory (only the request's small message crosses the socket);
- the ratio conch / raw, against the issue's target of 0.85 at batch 128.

Without CUDA the same two measurements run on the CPU at ``--cpu-batch`` (fp32, contiguous) and the GPU
part says it was skipped. The report (markdown) goes to stdout and, with ``--out``, to a file.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import tritonclient.grpc as grpcclient
import tritonclient.utils.shared_memory as shm

from bench.resnet50 import resnet50
from bench.servers import Ports, ServerProcess

TARGET_RATIO = 0.85
IMAGE = (3, 224, 224)
CLASSES = 1000


@dataclass(frozen=True)
class Setup:
    device: str  # "cuda" or "cpu"
    batch: int
    seconds: float
    clients: int
    instances: int

    @property
    def gpu(self) -> bool:
        return self.device == "cuda"


@dataclass(frozen=True)
class Figure:
    images_per_s: float
    batches: int


def raw_limit(model: torch.nn.Module, setup: Setup) -> Figure:
    """torch alone: H2D of float32 inputs, forward, logits back, one batch after the other."""
    device = torch.device(setup.device)
    net = model.to(device)
    if setup.gpu:
        net = net.half().to(memory_format=torch.channels_last)
    host = torch.randn(setup.batch, *IMAGE)
    if setup.gpu:
        host = host.pin_memory()

    def step() -> torch.Tensor:
        x = host.to(device, non_blocking=True)
        if setup.gpu:
            x = x.half().contiguous(memory_format=torch.channels_last)
        return net(x).float().cpu()

    with torch.inference_mode():
        for _ in range(5 if setup.gpu else 2):
            step()
        return _timed(step, setup.seconds, setup.batch)


def _timed(step: object, seconds: float, batch: int) -> Figure:
    batches = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds or batches == 0:
        step()  # type: ignore[operator]
        batches += 1
    return Figure(batches * batch / (time.perf_counter() - started), batches)


def write_repository(model: torch.nn.Module, root: Path, setup: Setup) -> Path:
    """``resnet50/1/model.pt`` (TorchScript, fp32 on the CPU) and its config."""
    folder = root / "resnet50"
    (folder / "1").mkdir(parents=True)
    traced = torch.jit.trace(
        model.cpu().float().to(memory_format=torch.contiguous_format), torch.randn(1, *IMAGE)
    )
    traced.save(str(folder / "1" / "model.pt"))
    kind = "KIND_GPU" if setup.gpu else "KIND_CPU"
    parameters = (
        'parameters { key: "precision" value { string_value: "fp16" } }\n'
        'parameters { key: "memory_format" value { string_value: "channels_last" } }\n'
        if setup.gpu
        else ""
    )
    (folder / "config.pbtxt").write_text(
        f'name: "resnet50"\nplatform: "pytorch_libtorch"\nmax_batch_size: {setup.batch}\n'
        'input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] } ]\n'
        'output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 1000 ] } ]\n'
        f"instance_group [ {{ kind: {kind} count: {setup.instances} }} ]\n"
        f"dynamic_batching {{ preferred_batch_size: [ {setup.batch} ] }}\n{parameters}"
    )
    return root


def through_conch(repository: Path, setup: Setup, log_dir: Path) -> Figure:
    """``--clients`` gRPC clients, each with its own input and output regions in /dev/shm."""
    ports = Ports()
    command = [sys.executable, "-m", "conch.cli.main", "serve", str(repository), "--host", "127.0.0.1"]
    command += [
        "--http-port",
        str(ports.http),
        "--grpc-port",
        str(ports.grpc),
        "--metrics-port",
        str(ports.metrics),
    ]
    server = ServerProcess("conch", command, ports, log_dir / "conch.log", ready_timeout_s=600)
    with server:
        images = np.random.default_rng(0).standard_normal((setup.batch, *IMAGE), dtype=np.float32)
        counts = [0] * setup.clients
        errors: list[str] = []
        stop_at: list[float] = []
        # The barrier's action runs before any party is released: every client sees the end time.
        start = threading.Barrier(
            setup.clients + 1, action=lambda: stop_at.append(time.perf_counter() + setup.seconds)
        )

        def client(index: int) -> None:
            try:
                _client_loop(ports.grpc_address, index, images, setup, counts, start, stop_at)
            except Exception as exc:  # reported below; a silent thread would read as a slow server
                errors.append(f"client {index}: {type(exc).__name__}: {exc}")
                start.abort()

        threads = [threading.Thread(target=client, args=(i,)) for i in range(setup.clients)]
        for thread in threads:
            thread.start()
        start.wait()
        began = stop_at[0] - setup.seconds
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - began
    if errors:
        raise RuntimeError("; ".join(errors) + "\n" + server.log_tail())
    return Figure(sum(counts) * setup.batch / elapsed, sum(counts))


def _client_loop(
    address: str,
    index: int,
    images: np.ndarray,
    setup: Setup,
    counts: list[int],
    start: threading.Barrier,
    stop_at: list[float],
) -> None:
    client = grpcclient.InferenceServerClient(address)
    in_bytes, out_bytes = images.nbytes, setup.batch * CLASSES * 4
    in_key, out_key = f"/conch_bench_in_{os.getpid()}_{index}", f"/conch_bench_out_{os.getpid()}_{index}"
    in_region = shm.create_shared_memory_region(f"in{index}", in_key, in_bytes)
    out_region = shm.create_shared_memory_region(f"out{index}", out_key, out_bytes)
    try:
        shm.set_shared_memory_region(in_region, [images])
        client.register_system_shared_memory(f"in{index}", in_key, in_bytes)
        client.register_system_shared_memory(f"out{index}", out_key, out_bytes)
        tensor = grpcclient.InferInput("INPUT__0", list(images.shape), "FP32")
        tensor.set_shared_memory(f"in{index}", in_bytes)
        output = grpcclient.InferRequestedOutput("OUTPUT__0")
        output.set_shared_memory(f"out{index}", out_bytes)
        for _ in range(3):  # each client's regions opened; TorchScript's profiling runs done
            client.infer("resnet50", [tensor], outputs=[output])
        start.wait()
        while time.perf_counter() < stop_at[0]:
            client.infer("resnet50", [tensor], outputs=[output])
            counts[index] += 1
        logits = shm.get_contents_as_numpy(out_region, np.float32, [setup.batch, CLASSES])
        if not np.isfinite(logits).all():
            raise RuntimeError("the logits in the output region are not finite")
    finally:
        client.unregister_system_shared_memory(f"in{index}")
        client.unregister_system_shared_memory(f"out{index}")
        shm.destroy_shared_memory_region(in_region)
        shm.destroy_shared_memory_region(out_region)


def report(
    setup: Setup, source: str, raw: Figure, served: Figure, skipped_gpu: bool, load_before: str
) -> str:
    ratio = served.images_per_s / raw.images_per_s
    where = torch.cuda.get_device_name(0) if setup.gpu else f"CPU ({os.cpu_count()} cores), fp32, contiguous"
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load = " ".join(f"{v:.2f}" for v in os.getloadavg())  # a busy machine's CPU figures say little
    kind = "KIND_GPU" if setup.gpu else "KIND_CPU"
    lines = [
        f"# ResNet-50 through conch against torch alone, {when}",
        "",
        f"- device: {where}; torch {torch.__version__}; Python {platform.python_version()}",
        f"- conch commit: {_commit()}; load average at the start: {load_before}, at the end: {load}",
        f"- network: {source}; random weights; batch {setup.batch}; {setup.seconds:.0f} s per measurement",
        f"- conch: TorchScript `model.pt`, {setup.instances} {kind} instance(s)"
        + (", `precision: fp16`, `memory_format: channels_last`" if setup.gpu else "")
        + f"; {setup.clients} gRPC client thread(s), inputs and outputs in system shared memory",
        "",
        "| measurement | images/s | batches |",
        "| --- | --- | --- |",
        f"| raw limit: torch alone ({'H2D of float32, forward, logits back' if setup.gpu else 'forward'}) "
        f"| {raw.images_per_s:,.1f} | {raw.batches} |",
        f"| conch over gRPC + system shared memory | {served.images_per_s:,.1f} | {served.batches} |",
        "",
        f"conch / raw: **{ratio:.2f}x**"
        + (
            f" (target at batch 128 on a GPU: {TARGET_RATIO}x)"
            if setup.gpu
            else " (CPU path; the target is for the GPU)"
        ),
    ]
    if skipped_gpu:
        lines += ["", "GPU part: skipped, no CUDA device is visible to torch on this machine."]
    return "\n".join(lines) + "\n"


def _commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=128, help="GPU batch size (default 128)")
    parser.add_argument("--cpu-batch", type=int, default=2, help="batch size of the CPU path (default 2)")
    parser.add_argument("--seconds", type=float, default=None, help="per measurement (GPU 20, CPU 15)")
    parser.add_argument("--clients", type=int, default=None, help="gRPC client threads (GPU 4, CPU 1)")
    parser.add_argument("--instances", type=int, default=None, help="instances (GPU 3, CPU 1)")
    parser.add_argument("--cpu", action="store_true", help="the CPU path even where CUDA is available")
    parser.add_argument("--out", type=Path, help="also write the report here")
    args = parser.parse_args(argv)
    gpu = torch.cuda.is_available() and not args.cpu
    setup = Setup(
        device="cuda" if gpu else "cpu",
        batch=args.batch if gpu else args.cpu_batch,
        seconds=args.seconds or (20.0 if gpu else 15.0),
        clients=args.clients or (4 if gpu else 1),
        instances=args.instances or (3 if gpu else 1),
    )
    load_before = " ".join(f"{v:.2f}" for v in os.getloadavg())
    model, source = resnet50()
    with tempfile.TemporaryDirectory(prefix="conch-resnet50-") as work:
        repository = write_repository(model, Path(work) / "repo", setup)
        raw = raw_limit(model, setup)
        model.cpu()
        if setup.gpu:
            torch.cuda.empty_cache()  # the server gets the GPU's memory back
        served = through_conch(repository, setup, Path(work))
    text = report(
        setup, source, raw, served, skipped_gpu=not torch.cuda.is_available(), load_before=load_before
    )
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
