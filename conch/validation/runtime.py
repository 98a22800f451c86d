"""Runtime checks, run in ONNX Runtime with the server's session options and input/output reshapes.

- **Determinism**: the same batch run twice must give bitwise identical outputs (a NaN equals a NaN).
  A model that does not (Dropout left in training mode, a random op) answers a retried request
  differently.
- **Batch invariance**: each row of a batch must match that row run alone, within
  :data:`conch.core.tolerances.TOLERANCES` (relative, absolute) for floating-point outputs and exactly
  for the others, with NaNs in the same places. Batches of different sizes can take different kernel
  paths (blocked matrix products against vector ones), which moves the last bits of a float; a row
  that depends on its batch mates (BatchNormalization in training form, a normalization across the
  batch axis) differs far beyond these tolerances, and the dynamic batcher would then change answers
  with the traffic.

Failing to run at all is a finding too: an error on the warm-up sample, which is meant to be valid
input, and a warning on random data, which the model may rightly refuse.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from conch.backends.onnxruntime import OnnxRuntimeInstance
from conch.core.errors import ConchError
from conch.core.findings import Finding, Severity
from conch.core.tolerances import tolerance_for
from conch.core.types import ExecutionTiming
from conch.validation.inputs import RuntimeInputs

BATCH_ROWS = 4

Outputs = dict[str, np.ndarray]


def runtime_findings(
    instance: OnnxRuntimeInstance,
    config: mc.ModelConfig,
    inputs: RuntimeInputs,
    model: str,
    field: str,
    report: Callable[[str], None],
) -> list[Finding]:
    """Run the model on ``inputs``: does it run, is it deterministic, is it batch-invariant."""
    names = [entry.name for entry in config.output]
    try:
        first = _run(instance, inputs.arrays, names)
        report("determinism")
        found = _determinism_findings(first, _run(instance, inputs.arrays, names), model, field)
        rows = min(len(array) for array in inputs.arrays.values()) if config.max_batch_size > 0 else 0
        if rows >= 2 and not found:  # rows of a nondeterministic model differ anyway
            report("batch invariance")
            found += _batch_findings(instance, inputs.arrays, first, rows, model, field)
    except (ConchError, ValueError) as exc:
        return [_run_failed(inputs, model, field, str(exc))]
    return found


def _run(instance: OnnxRuntimeInstance, arrays: dict[str, np.ndarray], names: list[str]) -> Outputs:
    return instance.run(arrays, names, ExecutionTiming())


def _determinism_findings(first: Outputs, second: Outputs, model: str, field: str) -> list[Finding]:
    return [
        Finding(
            "nondeterministic-output",
            Severity.ERROR,
            model,
            f"{field} output '{name}'",
            f"the same input run twice gave different values of output '{name}' "
            f"({_count_different(first[name], second[name])} of {first[name].size} elements differ)",
            "export in eval mode and remove random operators (Dropout in training mode, RandomNormal...)",
        )
        for name in first
        if not _identical(first[name], second[name])
    ]


def _batch_findings(
    instance: OnnxRuntimeInstance,
    arrays: dict[str, np.ndarray],
    batched: Outputs,
    rows: int,
    model: str,
    field: str,
) -> list[Finding]:
    worst: dict[str, tuple[int, str]] = {}
    for row in range(rows):
        alone = _run(instance, {name: array[row : row + 1] for name, array in arrays.items()}, list(batched))
        for name, values in alone.items():
            problem = _difference(batched[name][row : row + 1], values)
            if problem is not None and name not in worst:
                worst[name] = (row, problem)
    return [
        Finding(
            "batch-variant-output",
            Severity.ERROR,
            model,
            f"{field} output '{name}'",
            f"row {row} of a batch of {rows} differs from the same row run alone in output '{name}': "
            f"{problem}",
            "a row must not depend on its batch mates: export in eval mode (BatchNormalization with running "
            "statistics) and avoid operations across the batch axis, or set max_batch_size: 0",
        )
        for name, (row, problem) in worst.items()
    ]


def _identical(first: np.ndarray, second: np.ndarray) -> bool:
    if first.shape != second.shape or first.dtype != second.dtype:
        return False
    if first.dtype == object:
        return bool(first.tolist() == second.tolist())
    return first.tobytes() == second.tobytes()


def _count_different(first: np.ndarray, second: np.ndarray) -> int:
    if first.shape != second.shape:
        return first.size
    same = first == second
    if first.dtype.kind == "f":
        same |= np.isnan(first) & np.isnan(second)
    return int(first.size - np.count_nonzero(same))


def _difference(batched: np.ndarray, alone: np.ndarray) -> str | None:
    """What differs beyond tolerance, or None; floats compare within TOLERANCES, others exactly."""
    if batched.shape != alone.shape:
        return f"shape {list(batched.shape)} in the batch, {list(alone.shape)} alone"
    if batched.dtype.kind != "f":
        equal = batched.tolist() == alone.tolist()
        return None if equal else f"{_count_different(batched, alone)} of {batched.size} values differ"
    rtol, atol = tolerance_for(batched.dtype)
    if np.allclose(batched, alone, rtol=rtol, atol=atol, equal_nan=True):
        return None
    if not np.array_equal(np.isnan(batched), np.isnan(alone)):
        return "NaNs are in different places"
    gap = float(np.max(np.abs(batched.astype(np.float64) - alone.astype(np.float64))))
    return f"largest difference {gap:.3g}, beyond the tolerance (relative {rtol:g}, absolute {atol:g})"


def _run_failed(inputs: RuntimeInputs, model: str, field: str, reason: str) -> Finding:
    if inputs.from_warmup:
        return Finding(
            "model-run-failed",
            Severity.ERROR,
            model,
            field,
            f"the model failed on its warm-up sample: {reason}",
            "the warm-up sample should be valid input: fix the sample or the model",
        )
    return Finding(
        "random-input-rejected",
        Severity.WARNING,
        model,
        field,
        f"the model failed on random input, so determinism and batch invariance were not checked: {reason}",
        "add a model_warmup sample with realistic data (an input_data_file in warmup/) so they can be",
    )
