"""What the server writes about a request for a model's process, and reads back from its answer.

A request travels as a small dictionary (its tensors' references, the outputs asked for, its id,
Triton's correlation id and sequence flags, and the client's own parameters as JSON, as
``request.parameters()`` returns them); an answer as references to output tensors, or an error with
its Triton code.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from conch.backends.python import codes
from conch.backends.python.stub import conch_ipc
from conch.core.errors import ConchError, InternalError

#: Request parameters the protocol reserves: they steer the server and are not the model's.
RESERVED_PARAMETERS = frozenset(
    {
        "sequence_id",
        "sequence_start",
        "sequence_end",
        "priority",
        "timeout",
        "binary_data_output",
        "conch-route-key",
    }
)
SEQUENCE_START, SEQUENCE_END = 1, 2


def request_entry(
    key: int,
    refs: list[conch_ipc.TensorRef],
    output_names: list[str],
    request_id: str,
    parameters: dict[str, Any],
    model: tuple[str, int],
) -> dict[str, Any]:
    """One request of an ``execute`` message; ``model`` is (name, version)."""
    start, end = bool(parameters.get("sequence_start")), bool(parameters.get("sequence_end"))
    return {
        "key": key,
        "inputs": refs,
        "outputs": list(output_names),
        "request_id": request_id,
        "correlation_id": parameters.get("sequence_id", 0),
        "flags": (SEQUENCE_START if start else 0) | (SEQUENCE_END if end else 0),
        "parameters": _model_parameters(parameters),
        "model_name": model[0],
        "model_version": model[1],
    }


def _model_parameters(parameters: dict[str, Any]) -> str:
    """The client's own parameters as JSON (most requests have none: no encoding then)."""
    if not parameters:
        return "{}"
    return json.dumps({k: v for k, v in parameters.items() if k not in RESERVED_PARAMETERS})


def decode_answers(
    reply: dict[str, Any], wanted: list[list[str]], segments: conch_ipc.SegmentReader, label: str
) -> list[dict[str, np.ndarray] | ConchError | None]:
    """Every response of an ``execute`` reply: outputs (copied out of the model's segment at once),
    an error, or None where the model answers later through its response sender."""
    entries = reply["responses"]
    refs = [
        [conch_ipc.as_ref(ref) for ref in entry.get("outputs", ())]
        if entry and not entry.get("error")
        else []
        for entry in entries
    ]
    arrays = iter(segments.copy_all([ref for mine in refs for ref in mine]))
    answers: list[dict[str, np.ndarray] | ConchError | None] = []
    for entry, mine, names in zip(entries, refs, wanted, strict=True):
        if entry is None:
            answers.append(None)
        elif entry.get("error"):
            message, code = entry["error"]
            answers.append(codes.error_of_code(message, code))
        else:
            outputs = {ref.name: next(arrays) for ref in mine}
            answers.append(_wanted(outputs, names, label))
    return answers


def _wanted(
    outputs: dict[str, np.ndarray], wanted: list[str], label: str
) -> dict[str, np.ndarray] | ConchError:
    missing = [name for name in wanted if name not in outputs]
    if missing:
        return InternalError(
            f"{label} returned no output {missing} although the request asked for it; "
            f"it returned {sorted(outputs)}"
        )
    return outputs if len(outputs) == len(wanted) else {name: outputs[name] for name in wanted}


def decode_answer(
    entry: dict[str, Any], wanted: list[str] | None, segments: conch_ipc.SegmentReader, label: str
) -> dict[str, np.ndarray] | ConchError:
    """A response's outputs, copied out of the model's segment (only ``wanted`` ones, all there),
    or its error with the status its Triton code means."""
    if entry.get("error"):
        message, code = entry["error"]
        return codes.error_of_code(message, code)
    refs = map(conch_ipc.as_ref, entry.get("outputs", []))
    outputs = {ref.name: segments.copy(ref) for ref in refs}
    return outputs if wanted is None else _wanted(outputs, wanted, label)


def settle_inputs(pool: conch_ipc.SegmentPool | None, reply: dict[str, Any]) -> None:
    """The input segment of an answered execution: reused, or handed over to the model that keeps
    views of it (``kept``), so that no later batch overwrites them."""
    assert pool is not None
    if reply.get("release"):
        pool.release(reply["release"])
    elif reply.get("kept"):
        pool.hand_over(reply["kept"])
