"""The int8 twin against its fp32 version: the release gate's prediction figures, speed and size.

**Agreement and drift** are the release gate's own (:mod:`conch.release.compare`, counted by
:class:`conch.release.gate.StepFigures` and judged by :func:`conch.release.gate.judge`), with each
row of the evaluation rows taken as one request: a row agrees when every output makes the same
decision (the argmax of class scores, equal labels, a regression value within float32's tolerance);
its drift is ``1 - cosine`` of its float outputs. A model that does not batch is compared on its
rows as one request. The twin is refused when agreement is below ``min_agreement`` or when more rows
than the gate's ``max_drift_fraction`` drift beyond its ``drift_threshold``.

**Speed** is the median wall time of one batch (the first ``batch_rows`` rows, the most the server
batches for this model) over :data:`TIMED_RUNS` runs after :data:`WARM_RUNS`, with ONNX Runtime's
sessions built as ``conch serve`` builds them (same threads and graph optimization), the two
versions' runs taken in turns on the same rows. **Size** is the version folder's model files on disk.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from tritonclient.grpc import model_config_pb2 as mc

from conch.backends.onnxruntime import OnnxRuntimeInstance, open_session, read_signature
from conch.core.types import ExecutionTiming
from conch.optimizing.source import is_model_file
from conch.release.compare import compare_outputs
from conch.release.gate import GateLimits, Judgement, judge
from conch.release.spec import GateSpec
from conch.release.step_figures import StepFigures

WARM_RUNS = 3
TIMED_RUNS = 30
#: The release gate's defaults for the drift check.
DRIFT_THRESHOLD = GateSpec().drift_threshold
MAX_DRIFT_FRACTION = GateSpec().max_drift_fraction


@dataclass(frozen=True)
class VersionCost:
    """One version's size and speed on this machine."""

    version: int
    size_bytes: int
    median_batch_ms: float


@dataclass(frozen=True)
class Comparison:
    """What the int8 twin was measured at against its fp32 version, and whether it passes."""

    rows: int
    batch_rows: int
    compared: int
    agreement: float
    drift_fraction: float | None
    min_agreement: float
    judgement: Judgement
    fp32: VersionCost
    int8: VersionCost

    @property
    def passed(self) -> bool:
        return not self.judgement.failed

    def as_json(self) -> dict[str, Any]:
        """The figures for ``quantization.json`` and ``--json``."""
        return {
            "rows": self.rows,
            "batch_rows": self.batch_rows,
            "compared_requests": self.compared,
            "agreement": self.agreement,
            "drift_fraction": self.drift_fraction,
            "drift_threshold": DRIFT_THRESHOLD,
            "min_agreement": self.min_agreement,
            "max_drift_fraction": MAX_DRIFT_FRACTION,
            "passed": self.passed,
            "fp32": asdict(self.fp32),
            "int8": asdict(self.int8),
        }


def compare_versions(
    config: mc.ModelConfig,
    fp32_file: Path,
    int8_file: Path,
    rows: Mapping[str, np.ndarray],
    min_agreement: float,
) -> Comparison:
    """Run both files on ``rows`` (graph feeds) and measure them (see the module's docstring)."""
    batching = config.max_batch_size > 0
    count = len(next(iter(rows.values()))) if batching else 1
    batch_rows = min(config.max_batch_size, count) if batching else count
    fp32, int8 = open_session(fp32_file, config), open_session(int8_file, config)
    figures = StepFigures(DRIFT_THRESHOLD)
    datatypes = {tensor.name: tensor.datatype for tensor in read_signature(fp32).outputs}
    baseline = _outputs(fp32, rows, batch_rows, batching)
    candidate = _outputs(int8, rows, batch_rows, batching)
    for index in range(count) if batching else [None]:
        figures.record_comparison(
            compare_outputs(_row(baseline, index), _row(candidate, index), datatypes, sorted(datatypes))
        )
    snapshot = figures.snapshot()
    limits = GateLimits(0, math.inf, math.inf, min_agreement, MAX_DRIFT_FRACTION)
    batch = {name: array[:batch_rows] for name, array in rows.items()} if batching else dict(rows)
    fp32_ms, int8_ms = _median_ms((fp32, int8), batch)
    return Comparison(
        rows=count,
        batch_rows=batch_rows,
        compared=int(snapshot.compared),
        agreement=snapshot.agreements / snapshot.compared,
        drift_fraction=snapshot.drifted / snapshot.drift_scored if snapshot.drift_scored else None,
        min_agreement=min_agreement,
        judgement=judge(snapshot, limits),
        fp32=VersionCost(_version(fp32_file), model_size(fp32_file.parent), fp32_ms),
        int8=VersionCost(_version(int8_file), model_size(int8_file.parent), int8_ms),
    )


def model_size(version_dir: Path) -> int:
    """Bytes of the version folder's model files (:func:`~conch.optimizing.source.is_model_file`)."""
    return sum(path.stat().st_size for path in version_dir.rglob("*") if is_model_file(path))


def _outputs(
    session: ort.InferenceSession, rows: Mapping[str, np.ndarray], batch_rows: int, batching: bool
) -> dict[str, np.ndarray]:
    """Every output on every row, run in batches the server could form (graph shapes, no config)."""
    instance = OnnxRuntimeInstance(session, mc.ModelConfig())
    names = [node.name for node in session.get_outputs()]
    if not batching:
        return instance.run(dict(rows), names, ExecutionTiming())
    count = len(next(iter(rows.values())))
    parts = [
        instance.run({n: a[start : start + batch_rows] for n, a in rows.items()}, names, ExecutionTiming())
        for start in range(0, count, batch_rows)
    ]
    return {name: np.concatenate([part[name] for part in parts]) for name in names}


def _row(outputs: Mapping[str, np.ndarray], index: int | None) -> dict[str, np.ndarray]:
    if index is None:
        return dict(outputs)
    return {name: array[index : index + 1] for name, array in outputs.items()}


def _median_ms(
    sessions: tuple[ort.InferenceSession, ort.InferenceSession], batch: Mapping[str, np.ndarray]
) -> tuple[float, float]:
    """Each session's median time for ``batch``, their runs taken in turns.

    In turns, so that both see the same machine: on a shared machine a burst of other work during
    one version's runs would otherwise be charged to that version alone.
    """
    feeds = dict(batch)
    for session in sessions * WARM_RUNS:
        session.run(None, feeds)
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(TIMED_RUNS):
        for session, taken in zip(sessions, times, strict=True):
            started = time.perf_counter()
            session.run(None, feeds)
            taken.append(time.perf_counter() - started)
    return statistics.median(times[0]) * 1000, statistics.median(times[1]) * 1000


def _version(model_file: Path) -> int:
    name = model_file.parent.name
    return int(name) if name.isdigit() else 0
