"""Triton's generate extension: ``POST /v2/models/{m}[/versions/{v}]/generate`` and ``/generate_stream``.

A request is one flat JSON object. Each key that names a model input is that input (a JSON scalar
or array, converted to the input's datatype and shaped to its dims, with a batch of one for a
batching model); ``parameters`` are the request's parameters and ``id`` its id; any other key is
refused, so a misspelt input is not silently dropped. A response is one flat JSON object too:
``model_name``, ``model_version`` and each output by name, a scalar when it holds one element.

``generate`` answers once; ``generate_stream`` sends every response of a decoupled model as a
server-sent event (``data: {...}``) as it comes. An error before the first event is an ordinary
JSON error with its status; an error after it is an event ``data: {"error": "..."}``, as Triton.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import orjson

from conch.core import datatypes
from conch.core.errors import ConchError, InvalidArgumentError
from conch.core.types import InferenceRequest, InferenceResponse, Tensor
from conch.models.model import ModelVersion

SSE_CONTENT_TYPE = b"text/event-stream; charset=utf-8"


def decode_generate(body: bytes, name: str, version: str, served: ModelVersion) -> InferenceRequest:
    """The generate request ``body`` as an inference request for ``served``'s inputs."""
    try:
        document = orjson.loads(body) if body else {}
    except orjson.JSONDecodeError as exc:
        raise InvalidArgumentError(f"the generate request is not valid JSON: {exc}") from None
    if not isinstance(document, dict):
        raise InvalidArgumentError("the generate request must be a JSON object of input names and values")
    config = served.config
    known = {entry.name: entry for entry in config.input}
    parameters = document.pop("parameters", {})
    if not isinstance(parameters, dict):
        raise InvalidArgumentError("'parameters' of a generate request must be a JSON object")
    request_id = document.pop("id", "")
    unknown = sorted(set(document) - set(known))
    if unknown:
        raise InvalidArgumentError(
            f"unexpected inference input(s) {unknown} for model '{name}': each key of a generate "
            f"request names an input ({sorted(known)}), or is 'id' or 'parameters'"
        )
    batching = config.max_batch_size > 0
    inputs = []
    for key, value in document.items():
        entry = known[key]
        datatype = datatypes.from_config_type(entry.data_type)
        inputs.append(Tensor(key, datatype.name, _tensor(key, value, datatype, list(entry.dims), batching)))
    return InferenceRequest(
        model_name=name, model_version=version, id=str(request_id), inputs=inputs, parameters=parameters
    )


def _tensor(
    name: str, value: Any, datatype: datatypes.Datatype, dims: list[int], batching: bool
) -> np.ndarray:
    try:
        if datatype.name == "BYTES":
            flat = np.asarray(value, dtype=object).reshape(-1)
            array = np.empty(flat.size, dtype=object)
            array[:] = [v.encode("utf-8") if isinstance(v, str) else orjson.dumps(v) for v in flat.tolist()]
        else:
            array = np.asarray(value, dtype=datatype.numpy).reshape(-1)
    except (TypeError, ValueError):
        raise InvalidArgumentError(
            f"input '{name}' of a generate request must hold {datatype.name} values"
        ) from None
    shape = [d for d in dims]
    fixed = math.prod(d for d in shape if d >= 0)
    if shape.count(-1) == 1 and fixed:
        shape[shape.index(-1)] = array.size // fixed
    elif shape.count(-1) > 1 or not shape:
        shape = [array.size]
    if math.prod(shape) != array.size:
        raise InvalidArgumentError(
            f"input '{name}' of a generate request has {array.size} value(s), which do not fill its "
            f"dims {dims}"
        )
    return array.reshape(([1] if batching else []) + shape)


def encode_generate(response: InferenceResponse) -> dict[str, Any]:
    """A response as the generate extension's flat object."""
    document: dict[str, Any] = {"model_name": response.model_name, "model_version": response.model_version}
    if response.id:
        document["id"] = response.id
    for tensor in response.outputs:
        values = tensor.data.reshape(-1).tolist()
        if tensor.datatype == "BYTES":
            values = [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in values]
        document[tensor.name] = values[0] if len(values) == 1 else values
    return document


def event(document: dict[str, Any]) -> bytes:
    """One server-sent event carrying ``document``."""
    return b"data: " + orjson.dumps(document) + b"\n\n"


def event_of(answer: InferenceResponse | ConchError) -> bytes:
    """A response, or an error the model sent among its responses, as one event."""
    if isinstance(answer, ConchError):
        return event({"error": answer.message})
    return event(encode_generate(answer))
