"""The V2 REST inference body: JSON with optional binary tensor data appended, both directions.

With the binary extension, the header ``Inference-Header-Content-Length`` says how many leading bytes
are JSON; each input with ``parameters.binary_data_size`` takes its bytes, in order, from the rest.
Binary inputs are decoded as views over the request body, without a copy.
"""

from __future__ import annotations

from typing import Any

import orjson

from conch.core import classification, codecs
from conch.core import reserved_parameters as reserved
from conch.core.errors import InvalidArgumentError
from conch.core.types import InferenceRequest, InferenceResponse, RequestedOutput, Tensor
from conch.frontends.http.limits import DEFAULT_MAX_JSON_DEPTH
from conch.shared_memory.tensors import RegionLeases, shared_memory_ref

JSON_CONTENT_TYPE = b"application/json"
BINARY_CONTENT_TYPE = b"application/octet-stream"


def decode_request(
    body: bytes,
    header_length: int | None,
    model_name: str,
    model_version: str,
    regions: RegionLeases | None = None,
    max_json_depth: int = DEFAULT_MAX_JSON_DEPTH,
) -> InferenceRequest:
    """Parse an infer request body; ``header_length`` is the binary extension header, if sent.

    ``regions`` reads inputs from and holds the outputs' system shared-memory regions (None: refused).
    The inputs' ``data`` is left out of ``max_json_depth``: its nesting follows the tensor's shape, and
    :func:`conch.core.codecs.from_json` bounds it by the most dimensions a shape may have.
    """
    view = memoryview(body)
    if header_length is None:
        header_length = len(body)
    elif header_length > len(body):
        raise InvalidArgumentError(
            f"Inference-Header-Content-Length is {header_length} but the body has only {len(body)} bytes"
        )
    header = body if header_length == len(body) else view[:header_length]
    document = load_json_object(header, max_json_depth, skip_tensor_data=True)
    request = InferenceRequest(model_name=model_name, model_version=model_version)
    request.id = _optional(document, "id", str, "")
    request.parameters = _optional(document, "parameters", dict, {})
    reserved.check_request_parameters(request.parameters, "HTTP")
    inputs = _optional(document, "inputs", list, None)
    if inputs is None:
        raise InvalidArgumentError("request has no 'inputs' list")
    text = body if header_length == len(body) else None  # binary extension: each element checked
    offset = header_length
    for item in inputs:
        tensor, offset = _decode_input(item, view, offset, model_name, regions, text)
        request.inputs.append(tensor)
    if offset != len(body):
        raise InvalidArgumentError(
            f"unexpected additional input data for model '{model_name}': binary_data_size of the inputs "
            f"adds up to {offset - header_length} bytes but the body carries {len(body) - header_length} "
            "bytes after the JSON header"
        )
    for item in _optional(document, "outputs", list, []):
        request.outputs.append(_decode_output(item, regions))
    return request


def header_length(value: bytes) -> int:
    """``Inference-Header-Content-Length``: decimal digits, nothing else.

    ``int()`` alone would also read `` +5`` and ``1_000`` (found by
    tests/unit/frontends/test_fuzz_http_decoders.py): lengths no client writes, and other servers refuse.
    """
    text = bytes(value).strip()
    if text.startswith(b"-") and text[1:].isdigit():
        raise InvalidArgumentError("Inference-Header-Content-Length must be >= 0")
    if not text.isdigit() or len(text) > 18:
        raise InvalidArgumentError(
            "Inference-Header-Content-Length must be an integer: the JSON header's length in bytes, in "
            "decimal digits"
        )
    return int(text)


def encode_response(response: InferenceResponse, request: InferenceRequest) -> tuple[bytes, int | None]:
    """The response body and, when any output is binary, the JSON header's length.

    An output written to a shared-memory region has neither data nor parameters, as in Triton (whose
    C++ client, perf_analyzer's, refuses output parameters without ``binary_data_size``).
    """
    requested = request.outputs
    binary_by_name = {o.name: o.binary for o in requested} if requested else {}
    in_regions = {o.name for o in requested if o.shared_memory is not None} if requested else ()
    default_binary = bool(request.parameters.get("binary_data_output", False))
    outputs = []
    blobs: list[bytes | memoryview] = []
    for tensor in response.outputs:
        # orjson writes the shape tuple as a JSON list, as it would the list.
        entry: dict[str, Any] = {"name": tensor.name, "datatype": tensor.datatype, "shape": tensor.data.shape}
        if tensor.name in in_regions:  # the data is in the client's region
            outputs.append(entry)
            continue
        binary = binary_by_name.get(tensor.name)
        if binary if binary is not None else default_binary:
            blob = codecs.to_bytes(tensor.data)
            entry["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        else:
            entry["data"] = codecs.to_json(tensor.data)
        outputs.append(entry)
    document: dict[str, Any] = {"model_name": response.model_name, "model_version": response.model_version}
    if response.id:
        document["id"] = response.id
    if response.parameters:
        document["parameters"] = response.parameters
    document["outputs"] = outputs
    header = orjson.dumps(document, option=orjson.OPT_SERIALIZE_NUMPY)
    if not blobs:
        return header, None
    return b"".join([header, *blobs]), len(header)


def load_json_object(
    data: bytes | memoryview, max_depth: int = DEFAULT_MAX_JSON_DEPTH, skip_tensor_data: bool = False
) -> dict[str, Any]:
    """A request body that must be one JSON object nested at most ``max_depth`` deep; anything else
    is a 400 saying why. ``skip_tensor_data``: an infer request, whose inputs' ``data`` is not counted."""
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise InvalidArgumentError(f"request body is not valid JSON: {exc}") from None
    if not isinstance(document, dict):
        raise InvalidArgumentError("request body must be a JSON object")
    if _opening_brackets(data) > max_depth and json_depth(document, skip_tensor_data) > max_depth:
        raise InvalidArgumentError(
            f"request body nests JSON objects and lists more than {max_depth} deep (--http-max-json-depth)"
        )
    return document


def _opening_brackets(data: bytes | memoryview) -> int:
    """How many ``{`` and ``[`` the text holds: a bound on its depth, as each level opens with one.

    Brackets inside strings only raise the bound, so a text under the limit needs no walk. The two
    counts cost 0.6 us on ``tiny``'s infer body, where the walk cost 1.9 us (3.2% of the event loop at
    32 clients); a body with more brackets (nested tensor data, many inputs) is counted and walked.
    """
    text = data if isinstance(data, bytes) else bytes(data)
    return text.count(b"{") + text.count(b"[")


def json_depth(document: dict[str, Any], skip_tensor_data: bool = False) -> int:
    """How deep ``document`` nests objects and lists (``{}`` is 1), walked without recursion: orjson
    reads bodies nested 1024 deep, past Python's recursion limit.

    ``skip_tensor_data`` leaves out ``inputs[*].data``, which may hold millions of numbers: walking
    them here would cost more than decoding them.
    """
    inputs = document.get("inputs")
    if skip_tensor_data and isinstance(inputs, list):
        inputs = [{k: v for k, v in i.items() if k != "data"} if isinstance(i, dict) else i for i in inputs]
        document = {**document, "inputs": inputs}
    # Level by level, each level one comprehension: half the time of a stack of (node, depth) pairs.
    depth = 1
    level = [child for child in document.values() if isinstance(child, _CONTAINERS)]
    while level:
        depth += 1
        level = [
            child
            for node in level
            for child in (node.values() if isinstance(node, dict) else node)
            if isinstance(child, _CONTAINERS)
        ]
    return depth


_CONTAINERS = (dict, list)


def _decode_input(
    item: Any, body: memoryview, offset: int, model: str, regions: RegionLeases | None, text: bytes | None
) -> tuple[Tensor, int]:
    if not isinstance(item, dict) or not isinstance(item.get("name"), str):
        raise InvalidArgumentError("each entry of 'inputs' must be an object with a 'name'")
    name = item["name"]
    datatype = item.get("datatype")
    if not isinstance(datatype, str):
        raise InvalidArgumentError(f"input '{name}' has no 'datatype'")
    shape = codecs.check_shape(name, item.get("shape"))
    parameters = item.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise InvalidArgumentError(f"input '{name}': 'parameters' must be an object")
    _check_content_fields(name, item, parameters)
    ref = shared_memory_ref(name, parameters) if parameters else None
    if ref is not None:
        return Tensor(name, datatype, _leases(regions).read_input(name, datatype, shape, model, ref)), offset
    size = parameters.get("binary_data_size")
    if size is None:
        booleans = (
            text is None
            or datatype not in codecs.ONE_PASS_DATATYPES
            or codecs.element_count(shape) < _ONE_PASS_LEAST
            or _may_hold_booleans(text)
        )
        data = codecs.from_json(name, datatype, shape, item["data"], booleans)
        return Tensor(name, datatype, data), offset
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise InvalidArgumentError(f"input '{name}': binary_data_size must be a non-negative integer")
    if offset + size > len(body):
        raise InvalidArgumentError(
            f"unexpected size for input '{name}', expecting {offset + size - len(body)} additional bytes "
            f"for model '{model}': its binary_data_size {size} goes past the end of the body "
            f"({len(body) - offset} bytes left)"
        )
    data = codecs.from_bytes(name, datatype, shape, body[offset : offset + size], model)
    return Tensor(name, datatype, data), offset + size


def _decode_output(item: Any, regions: RegionLeases | None) -> RequestedOutput:
    if not isinstance(item, dict) or not isinstance(item.get("name"), str):
        raise InvalidArgumentError("each entry of 'outputs' must be an object with a 'name'")
    parameters = item.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise InvalidArgumentError(f"output '{item['name']}': 'parameters' must be an object")
    name = item["name"]
    if not parameters:  # the usual entry, {"name": ...}: none of the checks below can refuse it
        return RequestedOutput(name)
    reserved.refuse_output_misuse(name, parameters)
    ref = shared_memory_ref(name, parameters)
    if ref is not None:
        _leases(regions).check_output(ref)
    count = parameters.get(reserved.CLASSIFICATION)
    binary = parameters.get(reserved.BINARY_DATA)
    return RequestedOutput(
        name,
        None if binary is None else bool(binary),
        0 if count is None else classification.class_count(name, count),
        ref,
    )


def _leases(regions: RegionLeases | None) -> RegionLeases:
    if regions is None:
        raise InvalidArgumentError("system shared memory is not available to this request")
    return regions


def _check_content_fields(name: str, item: dict[str, Any], parameters: dict[str, Any]) -> None:
    """Triton's rule: an input's data is in exactly one of 'data', binary data or shared memory."""
    if ("data" in item) + (reserved.BINARY_DATA_SIZE in parameters) + (
        reserved.SHARED_MEMORY_REGION in parameters
    ) == 1:
        return
    given = [
        field
        for field, present in (
            ("'data'", "data" in item),
            ("'binary_data_size'", reserved.BINARY_DATA_SIZE in parameters),
            ("'shared_memory_region'", reserved.SHARED_MEMORY_REGION in parameters),
        )
        if present
    ]
    if len(given) != 1:
        found = "no field is set" if not given else "set " + " ".join(given)
        raise InvalidArgumentError(
            "Input must set only one of the following fields: 'data', 'binary_data_size' in "
            f"'parameters', 'shared_memory_region' in 'parameters'. But {found} (input '{name}')"
        )


#: Elements from which reading numbers in one pass repays looking for booleans in the body (~0.3 us):
#: below it, both ways take about the same time.
_ONE_PASS_LEAST = 32
#: Occurrences of a letter looked at before :func:`_may_hold_booleans` says "maybe".
_MOST_LOOKS = 32


def _may_hold_booleans(text: bytes) -> bool:
    """False only when neither ``true`` nor ``false`` is in the JSON ``text``: then no value is a bool.

    Each word is sought at its third letter, the rarer in a V2 body's keys (``u`` is in inputs and
    outputs only, ``l`` in none), with ``bytes.find``: memchr, ~0.2 us over the 20 kB of a 1024-float
    body, whose numbers hold neither letter; ``b"true" in text`` reads byte by byte, ~70 times slower.
    A text with many of those letters (BYTES data, say) is taken to hold the words.
    """
    for word, letter in ((b"true", b"u"), (b"false", b"l")):
        at = text.find(letter, 2)
        for _ in range(_MOST_LOOKS):
            if at < 0:
                break
            if text.startswith(word, at - 2):
                return True
            at = text.find(letter, at + 1)
        else:
            return True
    return False


def _optional(document: dict[str, Any], key: str, kind: type, default: Any) -> Any:
    value = document.get(key, default)
    if value is not default and not isinstance(value, kind):
        raise InvalidArgumentError(f"'{key}' must be a {kind.__name__} in the request body")
    return value
