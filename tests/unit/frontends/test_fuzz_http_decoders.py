"""Hypothesis fuzzing of the HTTP request decoders: any input decodes or is a 4xx saying why.

Covers the V2 JSON body with the binary extension (``infer_codec.decode_request``), the
``Inference-Header-Content-Length`` header, bodies with ``Content-Encoding`` (``body.read_body``),
the tensor codecs (``conch.core.codecs``) and the JSON depth walk. Bounded for CI; see
``tests/unit/fuzzing.py`` for a longer run.
"""

from __future__ import annotations

import asyncio
import gzip
import zlib
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conch.core import codecs
from conch.core.errors import InvalidArgumentError
from conch.core.types import InferenceRequest
from conch.frontends.http.body import read_body
from conch.frontends.http.infer_codec import decode_request, header_length, json_depth, load_json_object
from tests.unit.fuzzing import FUZZ, JSON, decodes_or_refuses

DATATYPES = ["BOOL", "UINT8", "INT8", "INT16", "INT32", "INT64", "FP16", "FP32", "FP64", "BYTES", "BF16"]
datatype = st.sampled_from([*DATATYPES, "FP99", ""]) | JSON
shape = st.lists(st.integers(-2, 6), max_size=4) | JSON
parameters = st.fixed_dictionaries(
    {},
    optional={
        "binary_data_size": st.integers(-4, 64) | JSON,
        "shared_memory_region": JSON,
        "classification": st.integers(-2, 4) | JSON,
        "binary_data": JSON,
    },
)
tensor_data = (
    JSON
    | st.lists(st.floats(allow_nan=False) | st.integers(-(2**63), 2**63 - 1), max_size=30)
    | st.lists(st.lists(st.integers(-3, 300), max_size=4), max_size=4)
)
v2_input = st.fixed_dictionaries(
    {"name": st.sampled_from(["INPUT0", "INPUT1", ""]) | JSON, "datatype": datatype, "shape": shape},
    optional={"data": tensor_data, "parameters": parameters | JSON},
)
v2_output = st.fixed_dictionaries(
    {"name": st.text(max_size=6) | JSON}, optional={"parameters": parameters | JSON}
)
v2_document = st.fixed_dictionaries(
    {"inputs": st.lists(v2_input, max_size=3) | JSON},
    optional={
        "id": JSON,
        "parameters": st.dictionaries(st.text(max_size=12), JSON, max_size=3) | JSON,
        "outputs": st.lists(v2_output, max_size=3),
    },
)


@FUZZ
@given(v2_document, st.binary(max_size=256), st.integers(-8, 8), st.booleans())
def test_a_v2_body_decodes_or_is_a_400(
    document: dict[str, Any], tail: bytes, shift: int, binary: bool
) -> None:
    header = orjson.dumps(document)
    body = header + tail
    length = max(0, len(header) + shift) if binary else None
    decoded = decodes_or_refuses(lambda: decode_request(body, length, "model", "1"))
    if decoded is not None:
        assert isinstance(decoded, InferenceRequest)
        for tensor in decoded.inputs:
            assert tensor.data.shape == tuple(tensor.data.shape)


@FUZZ
@given(st.binary(max_size=512), st.none() | st.integers(0, 600))
def test_any_bytes_decode_or_are_a_400(body: bytes, length: int | None) -> None:
    decodes_or_refuses(lambda: decode_request(body, length, "model", "1"))


@FUZZ
@given(st.binary(max_size=24) | st.from_regex(rb"\A[ +\-_0-9]{0,12}\Z"))
def test_the_header_length_is_digits_or_a_400(value: bytes) -> None:
    length = decodes_or_refuses(lambda: header_length(value), InvalidArgumentError)
    if length is not None:
        assert value.strip().isdigit(), f"{value!r} was read as {length}"
        assert length == int(value.strip())


@FUZZ
@given(datatype, shape, tensor_data)
def test_json_tensor_data_decodes_or_is_a_400(name: Any, dims: Any, data: Any) -> None:
    def decode() -> Any:
        checked = codecs.check_shape("x", dims)
        if not isinstance(name, str):
            raise InvalidArgumentError("no datatype")
        return codecs.from_json("x", name, checked, data)

    array = decodes_or_refuses(decode)
    if array is not None:
        assert array.shape == tuple(dims)


@FUZZ
@given(st.sampled_from(DATATYPES), st.lists(st.integers(0, 5), max_size=3), st.binary(max_size=128))
def test_raw_tensor_bytes_decode_or_are_a_400(name: str, dims: list[int], data: bytes) -> None:
    array = decodes_or_refuses(lambda: codecs.from_bytes("x", name, tuple(dims), data, "model"))
    if array is not None:
        assert array.shape == tuple(dims)


@FUZZ
@given(st.lists(st.binary(max_size=20), max_size=6), st.binary(max_size=6))
def test_bytes_elements_read_back_what_was_written_or_refuse_a_tail(
    elements: list[bytes], tail: bytes
) -> None:
    written = b"".join(len(e).to_bytes(4, "little") + e for e in elements)
    assert codecs.bytes_elements("x", written) == elements
    decodes_or_refuses(lambda: codecs.bytes_elements("x", written + tail))


def _compressed(kind: str, data: bytes) -> bytes:
    if kind == "gzip":
        return gzip.compress(data)
    if kind == "deflate":
        return zlib.compress(data)
    return data


@FUZZ
@given(
    st.sampled_from(["gzip", "deflate", "identity", "", "br", "GZIP"]),
    st.binary(max_size=300),
    st.integers(0, 400),
    st.integers(1, 5),
    st.booleans(),
    st.none() | st.text(max_size=8),
)
def test_a_body_reads_inflates_or_is_a_400(
    encoding: str, data: bytes, cut: int, pieces: int, compress: bool, length: str | None
) -> None:
    body = _compressed(encoding.lower(), data) if compress else data
    body = body[:cut] if cut < len(body) else body
    size = max(1, len(body) // pieces)
    chunks = [body[i : i + size] for i in range(0, len(body), size)] or [b""]
    messages = [{"body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]
    headers = [(b"content-encoding", encoding.encode())]
    if length is not None:
        headers.append((b"content-length", length.encode("utf-8")))

    async def receive() -> dict[str, Any]:
        return messages.pop(0)

    limit = 256
    result = decodes_or_refuses(lambda: asyncio.run(read_body({"headers": headers}, receive, limit)))
    if result is not None:
        assert len(result) <= limit


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


@FUZZ
@given(st.dictionaries(st.text(max_size=4), JSON, max_size=4))
def test_json_depth_is_the_nesting_depth(document: dict[str, Any]) -> None:
    assert json_depth(document) == _depth(document)
    assert json_depth(document, skip_tensor_data=True) == _depth(document) or isinstance(
        document.get("inputs"), list
    )


@FUZZ
@given(st.dictionaries(st.text(max_size=4), JSON, max_size=4), st.integers(1, 6), st.booleans())
def test_a_body_is_refused_exactly_when_it_nests_past_the_limit(
    document: dict[str, Any], limit: int, as_view: bool
) -> None:
    """The bracket count that spares most bodies the walk never lets a deep one through, and never
    refuses a shallow one whose strings hold brackets."""
    text = orjson.dumps(document)
    body = memoryview(text) if as_view else text
    if _depth(document) > limit:
        with pytest.raises(InvalidArgumentError, match=f"more than {limit} deep"):
            load_json_object(body, limit)
    else:
        assert load_json_object(body, limit) == orjson.loads(text)  # (infinities are written as null)


def test_brackets_inside_strings_do_not_count_as_depth() -> None:
    document = {"id": "[[[[{{{{" * 8, "parameters": {"note": "[" * 40}}
    assert load_json_object(orjson.dumps(document), 2) == document
    with pytest.raises(InvalidArgumentError, match="more than 2 deep"):
        load_json_object(orjson.dumps({"a": {"b": [1]}}), 2)
