"""The datatype table: V2 names against numpy, ``config.pbtxt`` and ONNX types."""

from __future__ import annotations

import numpy as np
import pytest
from tritonclient.grpc import model_config_pb2 as mc

from conch.core import datatypes
from conch.core.errors import InvalidArgumentError
from tests.fixtures.onnx_models import ONNX_TYPES

# V2 name -> the config enum Triton uses for it (BYTES is TYPE_STRING in model_config.proto).
CONFIG_NAMES = {name: "TYPE_STRING" if name == "BYTES" else f"TYPE_{name}" for name in ONNX_TYPES}


def test_the_table_has_every_v2_datatype() -> None:
    assert set(datatypes.BY_NAME) == set(ONNX_TYPES)


@pytest.mark.parametrize("name", sorted(ONNX_TYPES))
def test_onnx_type(name: str) -> None:
    assert datatypes.from_name(name).onnx_type == ONNX_TYPES[name]
    assert datatypes.BY_ONNX_TYPE[ONNX_TYPES[name]].name == name


@pytest.mark.parametrize("name", sorted(ONNX_TYPES))
def test_config_type(name: str) -> None:
    config_type = mc.DataType.Value(CONFIG_NAMES[name])

    assert datatypes.from_name(name).config_type == config_type
    assert datatypes.from_config_type(config_type).name == name
    assert datatypes.config_type_name(config_type) == CONFIG_NAMES[name]


@pytest.mark.parametrize("name", sorted(set(ONNX_TYPES) - {"BYTES"}))
def test_numpy_dtype_and_item_size(name: str) -> None:
    datatype = datatypes.from_name(name)

    assert datatypes.from_numpy(datatype.numpy) is datatype
    assert datatype.item_size == datatype.numpy.itemsize


def test_bytes_is_variable_length() -> None:
    assert datatypes.from_name("BYTES").item_size == 0


@pytest.mark.parametrize("dtype", [np.dtype(object), np.dtype("<U5"), np.dtype("S3")])
def test_strings_and_objects_are_bytes(dtype: np.dtype) -> None:
    assert datatypes.from_numpy(dtype).name == "BYTES"


def test_numpy_dtype_without_v2_datatype() -> None:
    with pytest.raises(InvalidArgumentError, match="complex64 has no V2 datatype"):
        datatypes.from_numpy(np.dtype(np.complex64))


@pytest.mark.parametrize("name", ["FLOAT", "fp32", "", ["FP32"]])
def test_unknown_name(name: object) -> None:
    with pytest.raises(InvalidArgumentError, match="unsupported datatype"):
        datatypes.from_name(name)  # type: ignore[arg-type]


def test_config_type_conch_cannot_serve() -> None:
    with pytest.raises(InvalidArgumentError, match="data type TYPE_BF16 is not supported"):
        datatypes.from_config_type(mc.TYPE_BF16)
    with pytest.raises(InvalidArgumentError, match="data type 999 is not supported"):
        datatypes.from_config_type(999)
