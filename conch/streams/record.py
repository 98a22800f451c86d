"""Stream entries in and out: an input entry to an :class:`InferenceRequest`, a response to a result
entry, a refusal to a dead-letter entry.

An input entry's ``data`` is either one row, a JSON object of input (or column) name to value, or a
V2 inference request body (``{"inputs": [...]}``) decoded by the HTTP frontend's codec, with its
tensors' bytes in the entry's ``binary`` field when their ``binary_data_size`` says so. A row's value
becomes a one-row tensor typed from the model's config; an input left out of the row, or given as
``null``, is absent. ``id``, ``data_version`` and ``ingestion_timestamp`` travel as request
parameters under those names, as an HTTP client would send them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
from tritonclient.grpc import model_config_pb2 as mc

from conch.core import codecs, datatypes
from conch.core.data_lineage import parse_timestamp
from conch.core.errors import ConchError, InvalidArgumentError, NotFoundError, did_you_mean
from conch.core.input_aliases import input_aliases
from conch.core.reserved_parameters import BINARY_DATA_OUTPUT
from conch.core.types import InferenceRequest, InferenceResponse, Tensor
from conch.frontends.http.infer_codec import decode_request

#: The short classes of ``reason`` a dead letter carries (the ``reason`` label of the metric).
POISON, CONTRACT, MALFORMED, TOO_LARGE, UNKNOWN_MODEL, INFERENCE = (
    "poison",
    "contract",
    "malformed",
    "too_large",
    "unknown_model",
    "inference",
)
#: Entry fields copied from the input record into its result and dead letter.
CARRIED = ("id", "data_version", "ingestion_timestamp")


class RecordRefused(Exception):
    """An entry that becomes a dead letter: ``kind`` is its short class, ``reason`` the whole why."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason


@dataclass(slots=True)
class Record:
    """A decoded input entry on its way to the model."""

    entry_id: str
    request: InferenceRequest
    #: The entry was one row: its outputs lose the batch dimension in the result.
    one_row: bool
    #: Unix seconds the record entered the pipeline: its ``ingestion_timestamp``, else the broker's
    #: time of the entry (a Redis entry id starts with its milliseconds).
    ingested_s: float
    carried: dict[str, str]


def fields_size(fields: Mapping[bytes, bytes]) -> int:
    """Bytes of an entry's names and values, the figure held to the record size limit."""
    return sum(len(key) + len(value) for key, value in fields.items())


def field_text(fields: Mapping[bytes, bytes], name: str) -> str | None:
    """A field's value as text, or None when the entry has no such field."""
    value = fields.get(name.encode())
    return None if value is None else value.decode("utf-8", errors="replace")


def decode_record(
    entry_id: str, fields: Mapping[bytes, bytes], model: str, config: mc.ModelConfig, max_bytes: int
) -> Record:
    """The entry as a request for ``model`` (served with ``config``), or :class:`RecordRefused`."""
    size = fields_size(fields)
    if size > max_bytes:
        raise RecordRefused(
            TOO_LARGE,
            f"record is {size} bytes, over the limit of {max_bytes} (max_record_bytes in streams.yaml, "
            "default --http-max-body-bytes); split it into smaller records",
        )
    carried = {name: text for name in CARRIED if (text := field_text(fields, name)) is not None}
    parameters: dict[str, Any] = {name: carried[name] for name in ("id", "data_version") if name in carried}
    ingested_s = entry_seconds(entry_id)
    if "ingestion_timestamp" in carried:
        ingested_s = record_timestamp(carried["ingestion_timestamp"])
        parameters["ingestion_timestamp"] = carried["ingestion_timestamp"]
    data = fields.get(b"data")
    if data is None:
        raise RecordRefused(MALFORMED, "record has no 'data' field: put the row's JSON object in 'data'")
    try:
        request, one_row = _request(data, fields.get(b"binary"), model, config)
    except ConchError as exc:
        raise RecordRefused(CONTRACT, exc.message) from None
    request.id = carried.get("id", entry_id)
    request.parameters.update(parameters)
    return Record(entry_id, request, one_row, ingested_s, carried)


def _request(
    data: bytes, binary: bytes | None, model: str, config: mc.ModelConfig
) -> tuple[InferenceRequest, bool]:
    if binary is not None:
        return decode_request(data + binary, len(data), model, ""), False
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise RecordRefused(MALFORMED, "field 'data' is not valid JSON") from None
    if not isinstance(document, dict):
        raise RecordRefused(
            MALFORMED, "field 'data' must be a JSON object: one row (input name to value) or a V2 request"
        )
    if isinstance(document.get("inputs"), list):
        return decode_request(data, None, model, ""), False
    return row_request(document, model, config), True


def row_request(row: Mapping[str, Any], model: str, config: mc.ModelConfig) -> InferenceRequest:
    """One row (input or column name to value) as one-row tensors typed from ``config``."""
    entries = {entry.name: entry for entry in config.input}
    aliases = input_aliases(config) if any(name not in entries for name in row) else {}
    batching = config.max_batch_size > 0
    request = InferenceRequest(model_name=model)
    for name, value in row.items():
        if value is None:
            continue  # written as absent: the model's or the contract's treatment of missing values
        entry = entries.get(aliases.get(name, name))
        if entry is None:
            raise InvalidArgumentError(
                f"record names input '{name}', which model '{model}' does not have"
                + did_you_mean(name, [*entries, *aliases])
            )
        datatype = datatypes.from_config_type(entry.data_type).name
        shape = _row_shape(value, list(entry.dims))
        array = codecs.from_json(entry.name, datatype, (1, *shape) if batching else shape, value)
        request.inputs.append(Tensor(entry.name, datatype, array))
    return request


def _row_shape(value: Any, dims: list[int]) -> tuple[int, ...]:
    """The config's dims where the value has as many elements (a scalar for ``dims: [1]``), else the
    value's own nesting."""
    shape: list[int] = []
    probe = value
    while isinstance(probe, list):
        shape.append(len(probe))
        probe = probe[0] if probe else None
    if -1 not in dims and math.prod(dims) == math.prod(shape):
        return tuple(dims)
    return tuple(shape)


def entry_seconds(entry_id: str) -> float:
    """The Unix time a Redis entry id records (its milliseconds part); now for any other id."""
    millis, _, _ = entry_id.partition("-")
    return int(millis) / 1000 if millis.isdigit() else time.time()


def record_timestamp(text: str) -> float:
    """A record's ``ingestion_timestamp`` as Unix seconds, read as the request parameter is read."""
    try:
        return parse_timestamp(text)
    except InvalidArgumentError:
        raise RecordRefused(
            MALFORMED,
            f"ingestion_timestamp '{text[:40]}' is neither Unix seconds nor RFC 3339 with an offset "
            "(such as 2026-01-31T12:00:00Z or 1769860800)",
        ) from None


def refusal_of(exc: ConchError) -> RecordRefused:
    """A model's refusal of a record as a dead letter: its message, and the class of the reason."""
    if isinstance(exc, NotFoundError):
        return RecordRefused(UNKNOWN_MODEL, exc.message)
    if isinstance(exc, InvalidArgumentError):
        return RecordRefused(CONTRACT, exc.message)
    return RecordRefused(INFERENCE, exc.message)


def result_fields(record: Record, response: InferenceResponse, written_s: float) -> dict[bytes, bytes]:
    """The result entry: ``data`` (the documented JSON object) and ``entry``, the input entry's id.

    An output a V2 body asked for as binary (``binary_data`` on the output, or ``binary_data_output``)
    is written as the HTTP binary extension writes it: ``{"datatype", "shape", "binary_data_size"}`` in
    ``outputs``, its bytes in the entry's ``binary`` field, in output order. For the sweep's ``mlp``
    (1,000 floats out) that is 4 kB instead of about 12 kB of JSON text to encode and store.
    """
    request = record.request
    chosen = {o.name: o.binary for o in request.outputs}
    default_binary = bool(request.parameters.get(BINARY_DATA_OUTPUT, False))
    outputs: dict[str, Any] = {}
    blobs: list[bytes | memoryview] = []
    for tensor in response.outputs:
        binary = chosen.get(tensor.name)
        if binary if binary is not None else default_binary:
            blob = codecs.to_bytes(tensor.data)
            outputs[tensor.name] = {
                "datatype": tensor.datatype,
                "shape": list(tensor.data.shape),
                "binary_data_size": len(blob),
            }
            blobs.append(blob)
        else:
            outputs[tensor.name] = _output_value(tensor, record.one_row)
    document = {
        "id": record.request.id,
        "model": response.model_name,
        "model_version": response.model_version,
        "outputs": outputs,
        "data_version": record.carried.get("data_version"),
        "ingestion_timestamp": record.carried.get("ingestion_timestamp"),
        "filled": response.parameters.get("filled"),
        "latency_ms": round(max(0.0, written_s - record.ingested_s) * 1000, 3),
    }
    data = orjson.dumps(document, option=orjson.OPT_SERIALIZE_NUMPY)
    fields = {b"data": data, b"entry": record.entry_id.encode()}
    if blobs:
        fields[b"binary"] = b"".join(blobs)
    return fields


def _output_value(tensor: Tensor, one_row: bool) -> Any:
    array = tensor.data[0] if one_row and tensor.data.ndim > 0 and len(tensor.data) == 1 else tensor.data
    if array.dtype.kind in "OUS":
        return np.vectorize(_text, otypes=[object])(array).tolist() if array.ndim else _text(array.item())
    if array.dtype == np.float16:  # orjson writes no half floats
        array = array.astype(np.float32)
    return np.ascontiguousarray(array)


def _text(value: Any) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


def dead_letter_fields(
    entry_id: str, fields: Mapping[bytes, bytes], refused: RecordRefused, model: str
) -> dict[bytes, bytes]:
    """The dead letter: the original ``data`` (and ``binary``), the ``reason``, its class and origin."""
    letter = {
        b"data": fields.get(b"data", b""),
        b"reason": refused.reason.encode(),
        b"reason_class": refused.kind.encode(),
        b"model": model.encode(),
        b"entry": entry_id.encode(),
    }
    for name in (b"binary", *(n.encode() for n in CARRIED)):
        if name in fields:
            letter[name] = fields[name]
    return letter
