"""Tensor data codecs: JSON lists and raw bytes, in both directions, for every V2 datatype."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import orjson
import pytest

from conch.core import codecs, datatypes
from conch.core.errors import InvalidArgumentError

# Four values per datatype, including each type's extremes, shaped [2, 2] in the round trips.
SAMPLES: dict[str, list[Any]] = {
    "BOOL": [True, False, False, True],
    "UINT8": [0, 1, 128, 255],
    "UINT16": [0, 1, 40000, 65535],
    "UINT32": [0, 1, 3_000_000_000, 2**32 - 1],
    "UINT64": [0, 1, 2**63, 2**64 - 1],
    "INT8": [-128, -1, 0, 127],
    "INT16": [-32768, -1, 0, 32767],
    "INT32": [-(2**31), -1, 0, 2**31 - 1],
    "INT64": [-(2**63), -1, 0, 2**63 - 1],
    "FP16": [-2.0, 0.0, 0.5, 65504.0],
    "FP32": [-1.5, 0.0, 0.25, 3.0e38],
    "FP64": [-1.0e300, 0.0, 0.1, 1.0e300],
    "BYTES": ["", "a", "héllo", "日本"],
}


def sample_array(datatype: str) -> np.ndarray:
    """The SAMPLES of ``datatype`` as the [2, 2] array a backend would produce."""
    values = SAMPLES[datatype]
    if datatype == "BYTES":
        array = np.empty(len(values), dtype=object)
        array[:] = [v.encode("utf-8") for v in values]
        return array.reshape(2, 2)
    return np.array(values, dtype=datatypes.from_name(datatype).numpy).reshape(2, 2)


def through_json(array: np.ndarray) -> Any:
    """What a client reads back: ``to_json`` serialized the way the HTTP frontend does, then parsed."""
    return orjson.loads(orjson.dumps(codecs.to_json(array), option=orjson.OPT_SERIALIZE_NUMPY))


def bytes_layout(*elements: bytes) -> bytes:
    """The V2 BYTES wire layout: each element as a 4-byte little-endian length, then the bytes."""
    return b"".join(struct.pack("<I", len(e)) + e for e in elements)


def test_samples_cover_every_datatype() -> None:
    assert set(SAMPLES) == set(datatypes.BY_NAME)


@pytest.mark.parametrize("datatype", sorted(SAMPLES))
def test_json_round_trip(datatype: str) -> None:
    array = sample_array(datatype)

    decoded = codecs.from_json("x", datatype, (2, 2), through_json(array))

    assert decoded.shape == (2, 2)
    assert decoded.dtype == array.dtype
    assert decoded.tolist() == array.tolist()


@pytest.mark.parametrize("datatype", sorted(SAMPLES))
def test_binary_round_trip(datatype: str) -> None:
    array = sample_array(datatype)

    decoded = codecs.from_bytes("x", datatype, (2, 2), codecs.to_bytes(array))

    assert decoded.shape == (2, 2)
    assert decoded.dtype == array.dtype
    assert decoded.tolist() == array.tolist()


@pytest.mark.parametrize("datatype", sorted(set(SAMPLES) - {"BYTES"}))
def test_to_bytes_is_the_little_endian_array_memory(datatype: str) -> None:
    array = sample_array(datatype)

    assert bytes(codecs.to_bytes(array)) == array.astype(array.dtype.newbyteorder("<")).tobytes()


def test_from_json_accepts_flat_and_nested_lists() -> None:
    flat = codecs.from_json("x", "INT32", (2, 3), [1, 2, 3, 4, 5, 6])
    nested = codecs.from_json("x", "INT32", (2, 3), [[1, 2, 3], [4, 5, 6]])

    assert flat.dtype == np.int32
    assert flat.tolist() == nested.tolist() == [[1, 2, 3], [4, 5, 6]]


def test_from_json_reshapes_nested_data_to_the_declared_shape() -> None:
    decoded = codecs.from_json("x", "FP32", (4,), [[1.0, 2.0], [3.0, 4.0]])

    assert decoded.shape == (4,)


def test_from_json_rejects_ragged_nested_lists() -> None:
    with pytest.raises(InvalidArgumentError, match="input 'x'"):
        codecs.from_json("x", "FP32", (3,), [[1.0, 2.0], [3.0]])


def test_from_json_bytes_become_utf8_encoded_bytes() -> None:
    decoded = codecs.from_json("text", "BYTES", (1, 2), [["héllo", ""]])

    assert decoded.dtype == object
    assert decoded.tolist() == [["héllo".encode(), b""]]


def test_from_json_bytes_rejects_non_strings() -> None:
    with pytest.raises(InvalidArgumentError, match="input 'text': BYTES data must be strings"):
        codecs.from_json("text", "BYTES", (2,), ["a", 1])


@pytest.mark.parametrize("value", [1, 0, "true", None])
def test_from_json_bool_accepts_only_true_and_false(value: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="BOOL data must be true or false"):
        codecs.from_json("flag", "BOOL", (2,), [True, value])


@pytest.mark.parametrize("value", [1.5, "3", True, None])
@pytest.mark.parametrize("datatype", ["INT32", "UINT8", "INT64"])
def test_from_json_integers_reject_floats_strings_and_booleans(datatype: str, value: Any) -> None:
    with pytest.raises(InvalidArgumentError, match=f"{datatype} data must be integers"):
        codecs.from_json("x", datatype, (2,), [1, value])


@pytest.mark.parametrize("value", ["1.5", True, None])
def test_from_json_floats_reject_non_numbers(value: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="FP32 data must be numbers"):
        codecs.from_json("x", "FP32", (2,), [1.0, value])


def test_from_json_floats_accept_integers() -> None:
    decoded = codecs.from_json("x", "FP64", (2,), [1, 2.5])

    assert decoded.dtype == np.float64
    assert decoded.tolist() == [1.0, 2.5]


def test_from_json_fp16_is_half_precision() -> None:
    decoded = codecs.from_json("x", "FP16", (3,), [0.5, -2.0, 65504.0])

    assert decoded.dtype == np.float16
    assert decoded.tolist() == [0.5, -2.0, 65504.0]


@pytest.mark.parametrize(
    ("datatype", "value"),
    [("INT8", 128), ("INT8", -129), ("UINT8", 256), ("UINT8", -1), ("INT64", 2**63), ("UINT64", 2**64)],
)
def test_from_json_integer_overflow_is_invalid_argument(datatype: str, value: int) -> None:
    with pytest.raises(InvalidArgumentError, match=f"input 'x': data does not match datatype {datatype}"):
        codecs.from_json("x", datatype, (1,), [value])


@pytest.mark.parametrize("booleans", [True, False])
@pytest.mark.parametrize(
    ("datatype", "data"),
    [("FP32", [1.0, 1e39]), ("FP32", [-1e39, 0.0]), ("FP32", [1, 10**39]), ("FP16", [70000.0, 1.0])],
)
def test_from_json_float_too_large_for_the_datatype_is_invalid_argument(
    datatype: str, data: list[float], booleans: bool
) -> None:
    # numpy alone would give infinity and a warning; JSON cannot hold infinity, so it is the client's.
    expected = f"input 'x': a value is too large for datatype {datatype}"
    with pytest.raises(InvalidArgumentError, match=expected):
        codecs.from_json("x", datatype, (2,), data, booleans=booleans)


def test_from_json_floats_at_the_datatypes_edge_are_kept() -> None:
    assert codecs.from_json("x", "FP32", (1,), [3.4e38], booleans=False).tolist() == [np.float32(3.4e38)]
    assert codecs.from_json("x", "FP16", (1,), [65504.0]).tolist() == [65504.0]
    assert codecs.from_json("x", "FP64", (1,), [1e300]).tolist() == [1e300]


def test_from_json_element_count_must_match_shape() -> None:
    with pytest.raises(InvalidArgumentError, match=r"shape \[2, 3\] needs 6 elements but data has 5"):
        codecs.from_json("x", "INT32", (2, 3), [1, 2, 3, 4, 5])


def test_from_json_unknown_datatype() -> None:
    with pytest.raises(InvalidArgumentError, match="unsupported datatype 'FLOAT'"):
        codecs.from_json("x", "FLOAT", (1,), [1.0])


def test_to_json_flattens_and_turns_bytes_into_text() -> None:
    assert through_json(np.arange(6, dtype=np.int64).reshape(2, 3)) == [0, 1, 2, 3, 4, 5]
    assert through_json(np.array([[b"a", b"\xc3\xa9"]], dtype=object)) == ["a", "é"]
    assert through_json(np.array(["x", "y"])) == ["x", "y"]


def test_to_json_keeps_extreme_values_exact() -> None:
    assert through_json(np.array([2**64 - 1], dtype=np.uint64)) == [2**64 - 1]
    assert through_json(np.array([-(2**63)], dtype=np.int64)) == [-(2**63)]
    assert through_json(np.array([0.5, 65504.0], dtype=np.float16)) == [0.5, 65504.0]
    assert through_json(np.array([True, False])) == [True, False]


def test_to_json_writes_fp32_with_float32_precision() -> None:
    """0.1 as float32 is 0.10000000149...; the client should read the float32 it would print, 0.1."""
    data = codecs.to_json(np.array([0.1], dtype=np.float32))

    assert orjson.dumps(data, option=orjson.OPT_SERIALIZE_NUMPY) == b"[0.1]"


def test_from_bytes_is_a_view_over_the_buffer() -> None:
    body = bytearray(b"HEAD" + np.arange(4, dtype=np.float32).tobytes() + b"TAIL")

    decoded = codecs.from_bytes("x", "FP32", (2, 2), memoryview(body)[4:20])

    assert decoded.tolist() == [[0.0, 1.0], [2.0, 3.0]]
    assert np.shares_memory(decoded, np.frombuffer(body, dtype=np.uint8))
    body[4:8] = np.float32(9.0).tobytes()
    assert decoded[0, 0] == 9.0


def test_from_bytes_size_must_match_shape() -> None:
    with pytest.raises(
        InvalidArgumentError,
        match=r"^input byte size mismatch for input 'x' for model 'm'\. Expected 16, got 15: "
        r"INT32 data of shape \[2, 2\] takes 16 bytes$",
    ):
        codecs.from_bytes("x", "INT32", (2, 2), b"\x00" * 15, "m")


def test_to_bytes_makes_non_contiguous_arrays_contiguous() -> None:
    transposed = np.arange(6, dtype=np.int16).reshape(2, 3).T

    assert bytes(codecs.to_bytes(transposed)) == np.ascontiguousarray(transposed).tobytes()


def test_bytes_layout_is_length_prefixed() -> None:
    array = np.array([b"ab", b"", "é"], dtype=object)

    assert codecs.to_bytes(array) == bytes_layout(b"ab", b"", "é".encode())


def test_from_bytes_reads_length_prefixed_elements() -> None:
    decoded = codecs.from_bytes("s", "BYTES", (1, 3), bytes_layout(b"ab", b"", b"\x00\xff"))

    assert decoded.dtype == object
    assert decoded.tolist() == [[b"ab", b"", b"\x00\xff"]]


def test_from_bytes_empty_bytes_tensor() -> None:
    assert codecs.from_bytes("s", "BYTES", (0,), b"").shape == (0,)


def test_from_bytes_truncated_length() -> None:
    with pytest.raises(InvalidArgumentError, match="input 's': BYTES data ends inside an element length"):
        codecs.from_bytes("s", "BYTES", (2,), bytes_layout(b"ab") + b"\x01\x00")


def test_from_bytes_element_longer_than_data() -> None:
    with pytest.raises(InvalidArgumentError, match="BYTES element is longer than the data sent"):
        codecs.from_bytes("s", "BYTES", (1,), struct.pack("<I", 5) + b"ab")


def test_from_bytes_element_count_must_match_shape() -> None:
    with pytest.raises(
        InvalidArgumentError,
        match=r"^expected 3 string elements for inference input 's' for model 'm', got 2: .* shape \[3\]",
    ):
        codecs.from_bytes("s", "BYTES", (3,), bytes_layout(b"a", b"b"), "m")


@pytest.mark.parametrize(
    ("shape", "expected"), [([2, 3], (2, 3)), ((0,), (0,)), ([], ())], ids=["list", "tuple", "scalar"]
)
def test_check_shape_accepts_non_negative_ints(shape: Any, expected: tuple[int, ...]) -> None:
    assert codecs.check_shape("x", shape) == expected


@pytest.mark.parametrize("shape", [[-1], [1.0], [True], "2,3", None])
def test_check_shape_rejects_anything_else(shape: Any) -> None:
    with pytest.raises(
        InvalidArgumentError, match="input 'x': shape must be a list of non-negative integers"
    ):
        codecs.check_shape("x", shape)
