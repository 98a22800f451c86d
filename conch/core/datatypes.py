"""The V2 datatypes and their numpy, model-config and ONNX equivalents, in one table.

BYTES tensors are numpy object arrays whose elements are ``bytes``: that is what the wire carries, and
backends convert at their own edge (ONNX Runtime wants ``str`` for string tensors).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from onnx import TensorProto
from tritonclient.grpc import model_config_pb2 as mc

from conch.core.errors import InvalidArgumentError


@dataclass(frozen=True)
class Datatype:
    """One V2 datatype: its wire name, numpy dtype, config enum, ONNX enum and element size."""

    name: str
    numpy: np.dtype
    config_type: int
    onnx_type: int

    @property
    def item_size(self) -> int:
        """Bytes per element on the wire; 0 for variable-length BYTES."""
        return 0 if self.name == "BYTES" else self.numpy.itemsize


_ALL = [
    Datatype("BOOL", np.dtype(np.bool_), mc.TYPE_BOOL, TensorProto.BOOL),
    Datatype("UINT8", np.dtype(np.uint8), mc.TYPE_UINT8, TensorProto.UINT8),
    Datatype("UINT16", np.dtype(np.uint16), mc.TYPE_UINT16, TensorProto.UINT16),
    Datatype("UINT32", np.dtype(np.uint32), mc.TYPE_UINT32, TensorProto.UINT32),
    Datatype("UINT64", np.dtype(np.uint64), mc.TYPE_UINT64, TensorProto.UINT64),
    Datatype("INT8", np.dtype(np.int8), mc.TYPE_INT8, TensorProto.INT8),
    Datatype("INT16", np.dtype(np.int16), mc.TYPE_INT16, TensorProto.INT16),
    Datatype("INT32", np.dtype(np.int32), mc.TYPE_INT32, TensorProto.INT32),
    Datatype("INT64", np.dtype(np.int64), mc.TYPE_INT64, TensorProto.INT64),
    Datatype("FP16", np.dtype(np.float16), mc.TYPE_FP16, TensorProto.FLOAT16),
    Datatype("FP32", np.dtype(np.float32), mc.TYPE_FP32, TensorProto.FLOAT),
    Datatype("FP64", np.dtype(np.float64), mc.TYPE_FP64, TensorProto.DOUBLE),
    Datatype("BYTES", np.dtype(np.object_), mc.TYPE_STRING, TensorProto.STRING),
]

BY_NAME: dict[str, Datatype] = {d.name: d for d in _ALL}
BY_CONFIG_TYPE: dict[int, Datatype] = {d.config_type: d for d in _ALL}
BY_ONNX_TYPE: dict[int, Datatype] = {d.onnx_type: d for d in _ALL}
_BY_NUMPY_KIND: dict[np.dtype, Datatype] = {d.numpy: d for d in _ALL}


def from_name(name: str) -> Datatype:
    """The datatype called ``name`` on the wire, or a 400 naming the unknown datatype."""
    try:
        return BY_NAME[name]
    except (KeyError, TypeError):
        raise InvalidArgumentError(f"unsupported datatype '{name}'") from None


def from_config_type(config_type: int) -> Datatype:
    """The datatype of a ``DataType`` enum value from ``config.pbtxt``."""
    try:
        return BY_CONFIG_TYPE[config_type]
    except KeyError:
        label = mc.DataType.Name(config_type) if config_type in mc.DataType.values() else config_type
        raise InvalidArgumentError(f"data type {label} is not supported by conch") from None


def from_numpy(dtype: np.dtype) -> Datatype:
    """The datatype of a numpy array; strings and bytes arrays are BYTES."""
    if dtype.kind in ("U", "S", "O"):
        return BY_NAME["BYTES"]
    try:
        return _BY_NUMPY_KIND[np.dtype(dtype)]
    except KeyError:
        raise InvalidArgumentError(f"numpy dtype {dtype} has no V2 datatype") from None


def config_type_name(config_type: int) -> str:
    """``TYPE_FP32`` style name of a config enum value, for messages."""
    return str(mc.DataType.Name(config_type))


def zeros(datatype: Datatype, shape: tuple[int, ...]) -> np.ndarray:
    """Triton's ``zero_data``: zeros, or empty strings for BYTES."""
    if datatype.name == "BYTES":
        return object_array([b""] * math.prod(shape), shape)
    return np.zeros(shape, dtype=datatype.numpy)


def object_array(values: list[bytes], shape: tuple[int, ...]) -> np.ndarray:
    """``values`` as an object array of ``shape`` (numpy would make a bytes array of them)."""
    array = np.empty(len(values), dtype=object)
    array[:] = values
    return array.reshape(shape)
