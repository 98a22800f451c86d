"""conch's ``triton_python_backend_utils``: the parts a model uses without a server (tensors, lookups,
datatypes, ``ModelConfig`` for auto-complete), imported as a model's process imports it."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

import conch.backends.python.stub as stub_package


@pytest.fixture(scope="module")
def pb_utils() -> Iterator[ModuleType]:
    folder = str(Path(stub_package.__file__).parent)
    sys.path.insert(0, folder)
    try:
        yield importlib.import_module("triton_python_backend_utils")
    finally:
        sys.path.remove(folder)


def test_tensor_and_lookups(pb_utils: ModuleType) -> None:
    tensor = pb_utils.Tensor("X", np.arange(4, dtype=np.int32))
    request = pb_utils.InferenceRequest(inputs=[tensor], requested_output_names=["Y"], model_name="m")
    assert pb_utils.get_input_tensor_by_name(request, "X") is tensor
    assert pb_utils.get_input_tensor_by_name(request, "Z") is None
    assert tensor.shape() == [4] and tensor.is_cpu() and tensor.triton_dtype() == 8  # INT32
    response = pb_utils.InferenceResponse([pb_utils.Tensor("Y", np.ones(2))])
    assert not response.has_error() and pb_utils.get_output_tensor_by_name(response, "Y") is not None
    assert request.parameters() == "{}" and request.model_name == "m"


def test_dlpack_round_trip(pb_utils: ModuleType) -> None:
    tensor = pb_utils.Tensor("X", np.arange(6, dtype=np.float32).reshape(2, 3))
    back = pb_utils.Tensor.from_dlpack("Y", tensor.to_dlpack())
    np.testing.assert_array_equal(back.as_numpy(), tensor.as_numpy())


def test_datatype_helpers(pb_utils: ModuleType) -> None:
    assert pb_utils.triton_string_to_numpy("TYPE_FP16") is np.float16
    assert pb_utils.numpy_to_triton_type(np.float64) == 12
    assert pb_utils.triton_to_numpy_type(13) is np.object_
    config = {"input": [{"name": "A", "data_type": "TYPE_FP32"}], "output": [{"name": "B"}]}
    assert pb_utils.get_input_config_by_name(config, "A")["data_type"] == "TYPE_FP32"
    assert pb_utils.get_output_config_by_name(config, "C") is None
    encoded = pb_utils.serialize_byte_tensor(np.array([b"ab", b"c"], dtype=object))
    assert pb_utils.deserialize_bytes_tensor(encoded).tolist() == [b"ab", b"c"]


def test_triton_error_codes(pb_utils: ModuleType) -> None:
    error = pb_utils.TritonError("nope", pb_utils.TritonError.NOT_FOUND)
    assert (error.message(), error.code()) == ("nope", 2)
    assert pb_utils.TritonError("x").code() == pb_utils.TritonError.INTERNAL


def test_model_config_auto_complete_rules(pb_utils: ModuleType) -> None:
    config = pb_utils.ModelConfig('{"name": "m", "max_batch_size": 0, "input": [], "output": []}')
    config.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [4]})
    config.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [4]})  # the same again: no-op
    config.add_output({"name": "Y", "data_type": "TYPE_FP32", "dims": [4]})
    config.set_max_batch_size(8)
    config.set_dynamic_batching()
    as_dict = config.as_dict()
    assert [i["name"] for i in as_dict["input"]] == ["X"] and as_dict["max_batch_size"] == 8
    assert as_dict["dynamic_batching"] == {}
    with pytest.raises(ValueError, match="dims"):
        config.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [5]})
    with pytest.raises(ValueError, match="only"):
        config.add_output({"name": "Z", "data_type": "TYPE_FP32", "dims": [1], "reshape": {}})
    with pytest.raises(ValueError, match="max_batch_size 8"):
        config.set_max_batch_size(2)
    sequence = pb_utils.ModelConfig({"name": "s", "sequence_batching": {"direct": {}}})
    with pytest.raises(ValueError, match="sequence_batching"):
        sequence.set_dynamic_batching()


def test_metric_names_labels_and_kinds_are_checked(pb_utils: ModuleType) -> None:
    family = pb_utils.MetricFamily("unit_requests", "requests", pb_utils.MetricFamily.COUNTER)
    counter = family.Metric(labels={"model": "m"})
    counter.increment(2)
    assert counter.value() == 2
    with pytest.raises(pb_utils.TritonModelException, match="non-negative"):
        counter.increment(-1)
    with pytest.raises(pb_utils.TritonModelException, match="only a gauge"):
        counter.set(1)
    with pytest.raises(pb_utils.TritonModelException, match="label name"):
        family.Metric(labels={"bad-label": "x"})
    with pytest.raises(pb_utils.TritonModelException, match="metric name"):
        pb_utils.MetricFamily("2bad", "x", pb_utils.MetricFamily.GAUGE)
    with pytest.raises(pb_utils.TritonModelException, match="another kind"):
        pb_utils.MetricFamily("unit_requests", "requests", pb_utils.MetricFamily.GAUGE)
    with pytest.raises(pb_utils.TritonModelException, match="buckets"):
        pb_utils.MetricFamily("unit_sizes", "sizes", pb_utils.MetricFamily.HISTOGRAM).Metric()
