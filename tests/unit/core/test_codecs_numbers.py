"""JSON number data read in one pass (``from_json(..., booleans=False)``) decodes exactly as the
element-by-element checks do: the same array, or the same 400."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

from conch.core import codecs
from conch.core.errors import InvalidArgumentError

NUMERIC = ["UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16", "FP32", "FP64"]

# Data as orjson reads it from a body without true or false (numbers, strings, nulls, objects,
# lists), decoded as shape [2, 2] but where given.
DATA: dict[str, Any] = {
    "floats": [0.1, -2.5, 3.0e38, 1e-45],
    "ints": [0, 1, -7, 2**53 + 1],
    "floats and ints": [1, 2.5, -(2**62), 0.0],
    "int64 extremes": [-(2**63), 2**63 - 1, 0, 1],
    "past int64": [2**63, 1, 2, 3],
    "past uint64": [2**64, 1, 2, 3],
    "float overflow": [1e300, -1e300, 1.0, 2.0],
    "nested": [[1.5, 2.5], [3.5, 4.5]],
    "nested ints": [[1, 2], [3, 4]],
    "ragged": [[1.0, 2.0], [3.0]],
    "ragged scalar first": [1.0, [2.0, 3.0], 4.0],
    "a string": [1.0, "2", 3.0, 4.0],
    "a null": [1.0, None, 3.0, 4.0],
    "an object": [1.0, {}, 3.0, 4.0],
    "empty": ((0,), []),
    "empty rows": ((2, 0), [[], []]),
    "scalar": ((1,), 5.5),
    "too few": [1.0, 2.0, 3.0],
}


def decoded(datatype: str, case: str, booleans: bool) -> tuple[str, Any]:
    """What from_json gives: the array's dtype, shape, bytes and warnings, or the error message."""
    shape, data = DATA[case] if isinstance(DATA[case], tuple) else ((2, 2), DATA[case])
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            array = codecs.from_json("x", datatype, shape, data, booleans=booleans)
    except InvalidArgumentError as exc:
        return "error", exc.message
    # numpy warns of an overflow once per element there, once per array here: the same warning.
    return "array", (array.dtype, array.shape, array.tobytes(), {str(w.message) for w in caught})


@pytest.mark.parametrize("datatype", NUMERIC)
@pytest.mark.parametrize("case", list(DATA))
def test_one_pass_decodes_as_the_element_checks(datatype: str, case: str) -> None:
    assert decoded(datatype, case, booleans=False) == decoded(datatype, case, booleans=True)


def test_one_pass_floats_are_a_fresh_contiguous_array() -> None:
    data = [1.0, 2.0, 3.0, 4.0]

    array = codecs.from_json("x", "FP32", (1, 4), data, booleans=False)

    assert array.dtype == np.float32
    assert array.flags.c_contiguous
    assert array.tolist() == [data]


def test_one_pass_nested_data_too_deep_keeps_its_message() -> None:
    data: Any = [1.0]
    for _ in range(codecs.MAX_DIMS):
        data = [data]

    with pytest.raises(InvalidArgumentError, match="data is nested deeper than 64 lists"):
        codecs.from_json("x", "FP32", (1,), data, booleans=False)
