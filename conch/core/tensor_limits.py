"""How many tensor elements one request may carry, per input and in all (``--max-input-elements``,
``--max-request-elements``).

The body limit bounds what a client sends, not what a request asks a model to hold: a shared-memory
input or a BYTES tensor of empty strings names many elements in few bytes, and a model's own
buffers grow with the element count. One rule here serves both frontends, before scheduling.
"""

from __future__ import annotations

from dataclasses import dataclass

from conch.core.errors import InvalidArgumentError
from conch.core.types import InferenceRequest


@dataclass(frozen=True)
class TensorLimits:
    """Element caps; the defaults allow a 1 GiB FP32 input and twice that per request."""

    max_input_elements: int = 1 << 28
    max_request_elements: int = 1 << 29


def check_element_counts(request: InferenceRequest, limits: TensorLimits) -> None:
    """A 400 naming the input and the flag when ``request`` carries more elements than ``limits``."""
    total = 0
    for tensor in request.inputs:
        count = int(tensor.data.size)
        if count > limits.max_input_elements:
            raise InvalidArgumentError(
                f"input '{tensor.name}' has {count} elements, more than the {limits.max_input_elements} "
                "one input may have (--max-input-elements); send a smaller tensor or split the batch"
            )
        total += count
    if total > limits.max_request_elements:
        raise InvalidArgumentError(
            f"the request's inputs have {total} elements, more than the {limits.max_request_elements} one "
            "request may have (--max-request-elements); split it into several requests"
        )
