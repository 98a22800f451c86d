"""``output_summary``: what a prediction said, in a few bytes of its log record.

A record must show the answer (the class and its score, or the value) so that a prediction can be
traced without keeping the response. For a classification-shaped output (floating point, one row of
class scores, or a batch of rows) that is the argmax class and its score; for anything else, the
first value. A batch is summarized by its first row, with ``rows`` saying how many there were. An
output named in ``--log-redact`` is summarized by its name alone: an identity model's output is its
input.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import Any

import numpy as np

from conch.core.types import InferenceResponse

#: The longest BYTES value a summary keeps, in characters (a generated text is not a summary).
MAX_TEXT = 64


def output_summary(response: InferenceResponse, redact: Collection[str] = ()) -> dict[str, Any] | None:
    """The summary of ``response``'s first output; None when it has none or it is empty."""
    if not response.outputs or response.outputs[0].data.size == 0:
        return None
    tensor = response.outputs[0]
    data = tensor.data
    summary: dict[str, Any] = {"output": tensor.name}
    if tensor.name in redact:
        summary["redacted"] = True
        return summary
    if data.dtype.kind == "f" and data.ndim in (1, 2) and data.shape[-1] > 1:
        row = data if data.ndim == 1 else data[0]
        best = int(row.argmax())
        summary.update({"class": best, "score": _number(float(row.item(best)))})
        if data.ndim == 2 and data.shape[0] > 1:
            summary["rows"] = int(data.shape[0])
        return summary
    first = data.reshape(-1)[0]
    if isinstance(first, bytes | str):
        text = first.decode("utf-8", "replace") if isinstance(first, bytes) else first
        summary["value"] = text[:MAX_TEXT]
    else:
        value = first.item() if isinstance(first, np.generic) else first
        summary["value"] = _number(value) if isinstance(value, float) else value
    return summary


def _number(value: float) -> float | str:
    """A finite float as it is; NaN and infinities as text, which JSON can hold."""
    return value if math.isfinite(value) else str(value)
