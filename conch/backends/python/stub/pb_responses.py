"""A model's responses as they cross to the server, and BLS answers as they come back.

Every output of one ``execute`` goes into one segment of the model's pool, each response checked
against the config first (:mod:`output_check`); a BLS answer is copied out of the server's segment,
which goes back at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import conch_ipc
import numpy as np
import triton_python_backend_utils as pb_utils
from output_check import OutputRules


def encode(
    pool: conch_ipc.SegmentPool,
    responses: list[pb_utils.InferenceResponse | None],
    rules: OutputRules | None,
    batches: list[int | None] | None,
    log: Callable[[str, int], None],
) -> dict[str, Any]:
    """One segment for every output of ``responses``; errors and tensor references per response.
    ``batches``: each response's request batch size, for the output check (None: not known)."""
    tensors: list[tuple[str, np.ndarray]] = []
    shapes: list[Any] = []
    for index, response in enumerate(responses):
        if response is None:
            shapes.append(None)
            continue
        if not isinstance(response, pb_utils.InferenceResponse):
            raise TypeError(f"execute returned {type(response).__name__} where an InferenceResponse belongs")
        error = response.error()
        if error is not None:
            # The model chose this message for its client: it goes as it is, as in Triton.
            shapes.append({"error": (error.message(), error.code())})
            continue
        outputs = [(t.name(), array_of(t)) for t in response.output_tensors()]
        if rules is not None:
            problem = rules.check(outputs, batches[index] if batches else None, log)
            if problem is not None:
                shapes.append({"error": (problem, pb_utils.TritonError.INTERNAL)})
                continue
        shapes.append({"first": len(tensors), "count": len(outputs), "parameters": response.parameters()})
        tensors += outputs
    segment, refs = pool.write(tensors)
    encoded = []
    for shape in shapes:
        if shape is None or "error" in shape:
            encoded.append(shape)
        else:
            first = shape["first"]
            encoded.append(
                {"outputs": refs[first : first + shape["count"]], "parameters": shape["parameters"]}
            )
    return {"segment": segment, "responses": encoded}


def decode(segments: conch_ipc.SegmentReader, entry: dict[str, Any]) -> pb_utils.InferenceResponse:
    """A BLS answer, its outputs copied out of the server's segment."""
    if entry.get("error"):
        message, code = entry["error"]
        return pb_utils.InferenceResponse(error=pb_utils.TritonError(message, code))
    refs = map(conch_ipc.as_ref, entry.get("outputs", []))
    outputs = [pb_utils.Tensor(ref.name, segments.copy(ref)) for ref in refs]
    return pb_utils.InferenceResponse(output_tensors=outputs, parameters=entry.get("parameters"))


def array_of(tensor: Any) -> np.ndarray:
    if not isinstance(tensor, pb_utils.Tensor):
        raise TypeError(f"expected pb_utils.Tensor, got {type(tensor).__name__}")
    return tensor.as_numpy()
