"""The ceiling no server can pass: the same ONNX file run by ONNX Runtime in this process, no server.

Default ``SessionOptions`` (what conch uses when a config sets no ``parameters``), CPU provider, a
fixed random batch run back to back. Batch 1 is the per-request cost a server adds its overhead to;
batch 32 is the throughput a perfect batching server at concurrency 32 would approach.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from bench.models import MODELS, write_onnx


@dataclass(frozen=True)
class OrtLimit:
    """In-process ONNX Runtime at one batch size: inferences (rows) per second and median call time."""

    batch: int
    throughput: float
    median_call_ms: float


def measure(session: ort.InferenceSession, width: int, batch: int, seconds: float) -> OrtLimit:
    """Run ``session`` on a ``[batch, width]`` input for ``seconds`` (after a short warm-up)."""
    feed = {"INPUT0": np.random.default_rng(0).random((batch, width), dtype=np.float32)}
    for _ in range(20):
        session.run(None, feed)
    calls: list[float] = []
    started = time.perf_counter()
    while (now := time.perf_counter()) - started < seconds:
        session.run(None, feed)
        calls.append(time.perf_counter() - now)
    elapsed = time.perf_counter() - started
    return OrtLimit(batch, len(calls) * batch / elapsed, statistics.median(calls) * 1e3)


def measure_model(model: str, seconds: float, batches: tuple[int, ...] = (1, 32)) -> dict[int, OrtLimit]:
    """Every batch size of ``batches`` for ``model``, one fresh session with default options."""
    with tempfile.TemporaryDirectory(prefix="conch-bench-ort-") as folder:
        path = write_onnx(Path(folder) / "model.onnx", model)
        session = ort.InferenceSession(str(path), ort.SessionOptions(), providers=["CPUExecutionProvider"])
    return {batch: measure(session, MODELS[model][0], batch, seconds) for batch in batches}
