"""Decoding and encoding tensor data: JSON lists and raw little-endian bytes, both directions.

These are the only functions that turn wire data into numpy arrays and back. Raw bytes become
``np.frombuffer`` views (no copy); BYTES elements use the V2 layout of a 4-byte little-endian length
followed by the bytes.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

from conch.core import datatypes
from conch.core.errors import InvalidArgumentError

_LENGTH = struct.Struct("<I")
#: numpy kinds of BYTES arrays: object (elements bytes or str), str and bytes.
_TEXT_KINDS = ("O", "U", "S")
#: numpy's limit on dimensions; a longer wire shape could not even be decoded into an array.
MAX_DIMS = 64


def element_count(shape: Sequence[int]) -> int:
    """Number of elements in a tensor of ``shape``."""
    return math.prod(shape)


def check_shape(name: str, shape: Any) -> tuple[int, ...]:
    """A shape from the wire as a tuple of non-negative ints, or a 400 naming the input."""
    # type() rather than isinstance(): a bool is an int to isinstance, and this runs per input.
    if type(shape) is not list and type(shape) is not tuple:
        raise InvalidArgumentError(f"input '{name}': shape must be a list of non-negative integers")
    for dim in shape:
        if type(dim) is not int or dim < 0:
            raise InvalidArgumentError(f"input '{name}': shape must be a list of non-negative integers")
    if len(shape) > MAX_DIMS:
        raise InvalidArgumentError(
            f"input '{name}': shape has {len(shape)} dimensions, at most {MAX_DIMS} allowed"
        )
    return tuple(shape)


def from_json(
    name: str, datatype: str, shape: tuple[int, ...], data: Any, booleans: bool = True
) -> np.ndarray:
    """Decode JSON ``data`` (flat or nested lists) into an array of ``shape``.

    ``booleans`` False says ``data`` is as orjson read it from a text without ``true`` or ``false``,
    which lets numbers be converted in one pass (:func:`_numbers`).
    """
    dtype = datatypes.from_name(datatype)
    if not isinstance(data, list):
        data = [data]
    try:
        array = None if booleans else _numbers(data, dtype.numpy)
        if array is None:
            array = _checked(name, datatype, dtype, data)
    except FloatingPointError:
        raise InvalidArgumentError(
            f"input '{name}': a value is too large for datatype {datatype} (largest magnitude "
            f"{float(np.finfo(dtype.numpy).max):.6g}); scale the data or send a wider datatype"
        ) from None
    expected = element_count(shape)
    if array.size != expected:
        raise InvalidArgumentError(
            f"input '{name}': shape {list(shape)} needs {expected} elements but data has {array.size}"
        )
    return array.reshape(shape)


def _checked(name: str, datatype: str, dtype: datatypes.Datatype, data: list[Any]) -> np.ndarray:
    """``data`` as ``dtype`` once each element is of a type the datatype allows."""
    try:
        if dtype.name == "BYTES":
            flat = _flatten(name, data)
            array = np.empty(len(flat), dtype=object)
            array[:] = [_to_bytes(name, v) for v in flat]
            return array
        _check_json_types(name, datatype, dtype.numpy.kind, set(map(type, _flatten(name, data))))
        return _cast(data, dtype.numpy)
    except (ValueError, TypeError, OverflowError) as exc:
        raise InvalidArgumentError(
            f"input '{name}': data does not match datatype {datatype}: {exc}"
        ) from None


_FLOAT64 = np.dtype(np.float64)
_INT64 = np.dtype(np.int64)
#: The datatypes whose JSON data :func:`_numbers` reads in one pass.
ONE_PASS_DATATYPES = frozenset({"FP16", "FP32", "FP64", "INT64"})


def _numbers(data: list[Any], dtype: np.dtype) -> np.ndarray | None:
    """Float or INT64 ``data`` as ``dtype`` in one pass; None where :func:`_checked` must decide.

    numpy's own reading of a list tells what it holds: float64 for floats and ints only, int64 for
    ints only (a string makes text, None or an object 'object', ragged or too deep lists an error),
    once bools are ruled out, as the caller has. That reading costs what the per-element type check
    alone cost (~16 ns an element), so float data decodes in about half the time. The values are
    np.asarray(data, dtype)'s: numpy reads each int as a double there too, and a float too large for
    ``dtype`` is refused alike (:func:`_cast`).
    """
    if dtype.kind != "f" and dtype != _INT64:
        return None
    try:
        found = np.array(data)
    except (ValueError, TypeError, OverflowError, RecursionError):
        return None
    if found.dtype == dtype:
        return found
    if dtype.kind != "f" or found.dtype not in (_FLOAT64, _INT64):
        return None
    if found.dtype == _INT64:
        found = found.astype(_FLOAT64)
    return found if found.dtype == dtype else _cast(found, dtype)


def _cast(values: Any, dtype: np.dtype) -> np.ndarray:
    """``values`` as ``dtype``; a number past a narrower float's range raises FloatingPointError.

    Why: numpy turns such a number into infinity with only a warning, and the model would compute on
    it. JSON has no infinity (orjson refuses one), so an infinity here always came from a too large
    value: the client's mistake, answered with a 400. The ``errstate`` block costs about 1 to 2 us a
    request (``python -m bench.codec_cost``, 3 alternating rounds against the code before it: 16->4
    floats 12.7-12.9 -> 13.8-13.9 us, 256->256 28.8-29.1 -> 30.4-30.7 us, 1024->1000 77.3-77.4 ->
    78.7-79.3 us); checking the result for infinities afterwards (a sum, a max) cost as much.
    """
    with np.errstate(over="raise"):
        return np.asarray(values, dtype=dtype)


def to_json(array: np.ndarray) -> list[Any] | np.ndarray:
    """Flatten an array for ``orjson.dumps(..., option=OPT_SERIALIZE_NUMPY)``.

    Numeric arrays stay arrays: orjson writes them natively, FP32 with float32 precision, far faster
    than ``tolist()``. BYTES elements become UTF-8 strings.
    """
    if array.dtype.kind in _TEXT_KINDS:
        return [_to_text(v) for v in array.ravel().tolist()]
    return array.ravel()  # C-contiguous, a copy only where the array is not


def from_bytes(
    name: str, datatype: str, shape: tuple[int, ...], buffer: memoryview | bytes, model: str = ""
) -> np.ndarray:
    """Decode raw tensor bytes into an array of ``shape``; a view over ``buffer`` for fixed-size types.

    ``model`` names the model in the errors, which use Triton's words.
    """
    dtype = datatypes.from_name(datatype)
    count = element_count(shape)
    if dtype.name == "BYTES":
        return _deserialize_bytes(name, shape, count, buffer, model)
    expected = count * dtype.item_size
    if len(buffer) != expected:
        raise InvalidArgumentError(byte_size_mismatch(name, model, datatype, shape, expected, len(buffer)))
    return np.frombuffer(buffer, dtype=dtype.numpy).reshape(shape)


def byte_size_mismatch(
    name: str, model: str, datatype: str, shape: Sequence[int], expected: int, got: int
) -> str:
    """Triton's words for tensor data of the wrong size, then the size's reason."""
    return (
        f"input byte size mismatch for input '{name}' for model '{model}'. Expected {expected}, got {got}: "
        f"{datatype} data of shape {list(shape)} takes {expected} bytes"
    )


def to_bytes(array: np.ndarray) -> bytes | memoryview:
    """Raw bytes of an array: a memoryview for fixed-size types, length-prefixed elements for BYTES."""
    if array.dtype.kind in _TEXT_KINDS:
        return b"".join(_LENGTH.pack(len(b)) + b for b in (_to_bytes("", v) for v in array.ravel().tolist()))
    return memoryview(np.ascontiguousarray(array)).cast("B")  # type: ignore[arg-type]


def bytes_elements(name: str, buffer: memoryview | bytes) -> list[bytes]:
    """The elements of a BYTES buffer: each a 4-byte little-endian length, then that many bytes."""
    view = memoryview(buffer)
    elements: list[bytes] = []
    offset = 0
    while offset < len(view):
        if offset + 4 > len(view):
            raise InvalidArgumentError(f"input '{name}': BYTES data ends inside an element length")
        (length,) = _LENGTH.unpack_from(view, offset)
        offset += 4
        if offset + length > len(view):
            raise InvalidArgumentError(f"input '{name}': BYTES element is longer than the data sent")
        elements.append(bytes(view[offset : offset + length]))
        offset += length
    return elements


def _deserialize_bytes(
    name: str, shape: tuple[int, ...], count: int, buffer: memoryview | bytes, model: str
) -> np.ndarray:
    elements = bytes_elements(name, buffer)
    if len(elements) != count:
        raise InvalidArgumentError(
            f"expected {count} string elements for inference input '{name}' for model '{model}', got "
            f"{len(elements)}: a BYTES tensor of shape {list(shape)} has {count} elements, each a 4-byte "
            "little-endian length and then that many bytes"
        )
    array = np.empty(count, dtype=object)
    array[:] = elements
    return array.reshape(shape)


_JSON_TYPES_ALLOWED: dict[str, set[type]] = {"b": {bool}, "i": {int}, "u": {int}, "f": {int, float}}


def _check_json_types(name: str, datatype: str, kind: str, found: set[type]) -> None:
    # numpy would quietly turn 1.5 into 1, "3" into 3 and true into 1; Triton rejects all three.
    # One set of the element types (built in C) keeps this cheap for large tensors.
    if found <= _JSON_TYPES_ALLOWED[kind]:
        return
    if kind == "b":
        raise InvalidArgumentError(f"input '{name}': BOOL data must be true or false")
    if kind in ("i", "u"):
        raise InvalidArgumentError(f"input '{name}': {datatype} data must be integers")
    raise InvalidArgumentError(f"input '{name}': {datatype} data must be numbers")


def _flatten(name: str, data: list[Any]) -> list[Any]:
    # Nested V2 data is nested throughout; a list mixing scalars and lists is ragged and fails later.
    if not data or not isinstance(data[0], list):
        return data
    flat: list[Any] = []
    stack = [iter(data)]
    while stack:
        for value in stack[-1]:
            if isinstance(value, list):
                if len(stack) >= MAX_DIMS:
                    raise InvalidArgumentError(
                        f"input '{name}': data is nested deeper than {MAX_DIMS} lists, the most a shape has"
                    )
                stack.append(iter(value))
                break
            flat.append(value)
        else:
            stack.pop()
    return flat


def _to_bytes(name: str, value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, np.bytes_ | np.str_):
        return _to_bytes(name, value.item())
    raise InvalidArgumentError(f"input '{name}': BYTES data must be strings")


def _to_text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)
