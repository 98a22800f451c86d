"""``pb_utils.Tensor`` and the datatype helpers: Triton's type names and numbers, numpy dtypes, and
BYTES in Triton's wire layout."""

from __future__ import annotations

from typing import Any

import conch_ipc
import numpy as np
from pb_errors import TritonModelException

#: Triton's config type names (``TYPE_FP32``) to numpy, from the one V2 table in conch_ipc.
TRITON_STRING_TO_NUMPY: dict[str, Any] = {
    ("TYPE_STRING" if name == "BYTES" else f"TYPE_{name}"): dtype
    for name, dtype in conch_ipc.NUMPY_OF.items()
}
# Triton's TRITONSERVER_DataType numbers, which numpy_to_triton_type and triton_dtype() return.
_TRITON_TYPE_NUMBERS = {
    "BOOL": 1,
    "UINT8": 2,
    "UINT16": 3,
    "UINT32": 4,
    "UINT64": 5,
    "INT8": 6,
    "INT16": 7,
    "INT32": 8,
    "INT64": 9,
    "FP16": 10,
    "FP32": 11,
    "FP64": 12,
    "BYTES": 13,
}
_NUMPY_OF_NUMBER = {
    number: TRITON_STRING_TO_NUMPY["TYPE_STRING" if name == "BYTES" else f"TYPE_{name}"]
    for name, number in _TRITON_TYPE_NUMBERS.items()
}


class Tensor:
    """A named tensor on the CPU. ``Tensor(name, numpy_array)``, or ``Tensor.from_dlpack(name, x)``."""

    def __init__(self, name: str, data: np.ndarray) -> None:
        if not isinstance(data, np.ndarray):
            raise TritonModelException(f"tensor '{name}' must be created from a numpy array")
        if data.dtype.kind in ("U", "S"):
            data = data.astype(object)
        self._name = name
        self._data = data

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._data

    def shape(self) -> list[int]:
        return list(self._data.shape)

    def triton_dtype(self) -> int:
        return numpy_to_triton_type(self._data.dtype)

    def is_cpu(self) -> bool:
        return True

    def to_dlpack(self) -> Any:
        """A DLPack capsule over the data (torch's when torch is installed, else numpy's)."""
        try:
            import torch.utils.dlpack

            return torch.utils.dlpack.to_dlpack(torch.from_numpy(self._numeric("to_dlpack")))
        except ImportError:
            return self._numeric("to_dlpack").__dlpack__()

    def __dlpack__(self, stream: Any = None) -> Any:
        return self._numeric("__dlpack__").__dlpack__()

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)  # kDLCPU, device 0

    @staticmethod
    def from_dlpack(name: str, capsule: Any) -> Tensor:
        """A tensor from a DLPack capsule or any object with ``__dlpack__`` (a GPU tensor is copied to
        the CPU: conch passes tensors between processes in CPU shared memory)."""
        try:
            import torch.utils.dlpack

            found = torch.utils.dlpack.from_dlpack(capsule)
            return Tensor(name, found.detach().cpu().numpy())
        except ImportError:
            if hasattr(capsule, "__dlpack__"):
                return Tensor(name, np.from_dlpack(capsule))
            raise TritonModelException(
                "from_dlpack on a raw capsule needs torch in the model's environment"
            ) from None

    def _numeric(self, what: str) -> np.ndarray:
        if self._data.dtype == object:
            raise TritonModelException(f"{what} is not supported for BYTES tensors")
        return np.ascontiguousarray(self._data)


def triton_string_to_numpy(triton_type_string: str) -> Any:
    return TRITON_STRING_TO_NUMPY[triton_type_string]


def triton_to_numpy_type(data_type: int) -> Any:
    return _NUMPY_OF_NUMBER.get(data_type)


def numpy_to_triton_type(data_type: Any) -> int:
    dtype = np.dtype(data_type)
    if dtype.kind in ("O", "S", "U"):
        return _TRITON_TYPE_NUMBERS["BYTES"]
    for name, number in _TRITON_TYPE_NUMBERS.items():
        if name != "BYTES" and np.dtype(_NUMPY_OF_NUMBER[number]) == dtype:
            return number
    raise TritonModelException(f"numpy dtype {dtype} has no Triton datatype")


def serialize_byte_tensor(input_tensor: np.ndarray) -> np.ndarray:
    """BYTES elements in Triton's wire layout (4-byte little-endian length, then the bytes), as uint8."""
    return np.frombuffer(conch_ipc.serialize_bytes(np.asarray(input_tensor)), dtype=np.uint8)


def deserialize_bytes_tensor(encoded_tensor: bytes | np.ndarray) -> np.ndarray:
    """The inverse of :func:`serialize_byte_tensor`: a flat object array of ``bytes``."""
    raw = encoded_tensor.tobytes() if isinstance(encoded_tensor, np.ndarray) else bytes(encoded_tensor)
    flat = conch_ipc.deserialize_bytes(raw, (-1,))
    return flat
