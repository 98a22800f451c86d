"""``input_hash``: the rule of docs/observability.md, checked against hashes this test writes itself."""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path
from typing import Any

import numpy as np

from conch.core.types import Tensor
from conch.observability.input_hash import input_hash, tensor_hash


def spec_hash(*parts: tuple[str, str, str, bytes]) -> str:
    """sha256 over name NUL datatype NUL shape NUL raw bytes, for each (name, datatype, shape, raw)."""
    digest = hashlib.sha256()
    for name, datatype, shape, raw in parts:
        digest.update(b"\0".join([name.encode(), datatype.encode(), shape.encode(), raw]))
    return digest.hexdigest()


def test_numeric_inputs_hash_their_little_endian_bytes_in_request_order() -> None:
    x = Tensor("x", "FP32", np.array([[1.0, -2.5]], dtype=np.float32))
    n = Tensor("n", "INT64", np.array(7, dtype=np.int64))
    flags = Tensor("flags", "BOOL", np.array([True, False, True]))

    expected = spec_hash(
        ("x", "FP32", "1,2", struct.pack("<2f", 1.0, -2.5)),
        ("n", "INT64", "", struct.pack("<q", 7)),
        ("flags", "BOOL", "3", b"\x01\x00\x01"),
    )
    assert input_hash([x, n, flags]) == expected
    assert input_hash([n, x, flags]) != expected


def test_bytes_elements_are_length_prefixed_as_tritons_binary_format_writes_them() -> None:
    elements = np.array([b"ab", b"", "h\u00e9llo"], dtype=object).reshape(3, 1)
    raw = b"".join(struct.pack("<I", len(v)) + v for v in (b"ab", b"", "h\u00e9llo".encode()))

    assert input_hash([Tensor("text", "BYTES", elements)]) == spec_hash(("text", "BYTES", "3,1", raw))


def test_a_big_endian_or_strided_array_hashes_as_its_contiguous_little_endian_values() -> None:
    values = np.arange(12, dtype=np.int32).reshape(3, 4)
    strided = values[:, ::2]
    big = values.astype(">i4")

    assert input_hash([Tensor("v", "INT32", strided)]) == input_hash(
        [Tensor("v", "INT32", np.ascontiguousarray(strided))]
    )
    assert input_hash([Tensor("v", "INT32", big)]) == input_hash([Tensor("v", "INT32", values)])
    assert input_hash([Tensor("v", "INT32", values)]) == spec_hash(("v", "INT32", "3,4", values.tobytes()))


def test_the_hash_of_one_tensor_is_the_hash_of_a_request_of_it_alone() -> None:
    tensor = Tensor("INPUT1", "FP16", np.array([0.5, 1.5], dtype=np.float16))

    assert (
        tensor_hash(tensor)
        == input_hash([tensor])
        == spec_hash(("INPUT1", "FP16", "2", np.array([0.5, 1.5], dtype="<f2").tobytes()))
    )


def test_the_snippet_in_the_docs_computes_the_servers_hash() -> None:
    guide = (Path(__file__).resolve().parents[3] / "docs" / "observability.md").read_text()
    section = guide.split("### The input hash", 1)[1]
    snippet = section.split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict[str, Any] = {}
    exec(snippet.replace("print(", "_printed = ("), namespace)
    texts = np.array([b"ab", b"", "h\u00e9llo".encode()], dtype=object).reshape(3, 1)
    values = np.arange(6, dtype=">f8").reshape(2, 3)
    flags = np.array([True, False])

    documented = namespace["input_hash"]([("t", "BYTES", texts), ("v", "FP64", values), ("f", "BOOL", flags)])

    assert documented == input_hash(
        [Tensor("t", "BYTES", texts), Tensor("v", "FP64", values), Tensor("f", "BOOL", flags)]
    )
    assert namespace["_printed"] == input_hash(
        [Tensor("INPUT0", "FP32", np.arange(16, dtype=np.float32).reshape(1, 16))]
    )
