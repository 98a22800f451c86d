"""conch.export on models that are already ONNX (a ModelProto or a .onnx path), and argument errors.

An ONNX model is its own original: export checks that it runs on the sample and writes the same
config, warm-up and metadata as for any other framework.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from tritonclient.grpc import model_config_pb2 as mc

from conch.exporting import ExportError, export
from conch.packaging.metadata import read_metadata
from conch.repository.config import parse_config
from conch.repository.warmup import warmup_samples
from tests.fixtures.onnx_models import (
    IR_VERSION,
    OPSET,
    add_sub_model,
    fixed_shape_model,
    string_model,
    variable_dims_model,
)


def read_config(model_dir: Path) -> mc.ModelConfig:
    return parse_config((model_dir / "config.pbtxt").read_text())


def batch_only_model() -> onnx.ModelProto:
    """X [batch] -> Identity -> Y [batch]: a tensor whose only dimension is the batch."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["X"], ["Y"])],
        "batch_only",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch"])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch"])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)


def test_model_proto_with_named_inputs(tmp_path: Path) -> None:
    sample = {"INPUT0": np.ones((3, 16)), "INPUT1": np.arange(48.0).reshape(3, 16)}

    version_dir = export(add_sub_model(), sample, repository=tmp_path, name="add-sub")

    config = read_config(tmp_path / "add-sub")
    assert [(e.name, e.data_type, list(e.dims)) for e in config.input] == [
        ("INPUT0", mc.TYPE_FP32, [16]),
        ("INPUT1", mc.TYPE_FP32, [16]),
    ]
    (warmup,) = warmup_samples(config, tmp_path / "add-sub")
    np.testing.assert_array_equal(warmup.inputs["INPUT1"], np.arange(16.0, dtype=np.float32).reshape(1, 16))
    metadata = read_metadata(version_dir)
    assert metadata.framework["name"] == "onnx"
    assert metadata.framework["producer"] == "conch-tests"
    assert metadata.feature_names is None


def test_onnx_path_with_a_text_sample(tmp_path: Path) -> None:
    source = tmp_path / "downloaded.onnx"
    source.write_bytes(string_model().SerializeToString())
    sample = np.array([["héllo"], ["conch 🐚"]])

    version_dir = export(source, sample, repository=tmp_path / "models", name="text")

    assert onnx.load(version_dir / "model.onnx") == string_model()
    warmup_file = tmp_path / "models" / "text" / "warmup" / "TEXT"
    assert warmup_file.read_bytes() == len("héllo".encode()).to_bytes(4, "little") + "héllo".encode()


def test_a_graph_without_a_batch_dimension_is_not_batched(tmp_path: Path) -> None:
    export(fixed_shape_model(), np.ones((2, 3)), repository=tmp_path, name="fixed")

    config = read_config(tmp_path / "fixed")
    assert config.max_batch_size == 0
    assert not config.HasField("dynamic_batching")
    assert list(config.model_warmup[0].inputs["X"].dims) == [2, 3]


def test_batch_only_and_variable_dims_get_concrete_warmup_dims(tmp_path: Path) -> None:
    export(batch_only_model(), np.array([0.5, 1.5, 2.5]), repository=tmp_path, name="batch-only")
    export(variable_dims_model(), np.ones((2, 5)), repository=tmp_path, name="variable")

    batch_only = read_config(tmp_path / "batch-only")
    assert list(batch_only.input[0].dims) == [1] and batch_only.input[0].HasField("reshape")
    (warmup,) = warmup_samples(batch_only, tmp_path / "batch-only")
    np.testing.assert_array_equal(warmup.inputs["X"], np.array([[0.5]], dtype=np.float32))
    variable = read_config(tmp_path / "variable")
    assert list(variable.input[0].dims) == [-1]
    assert list(variable.model_warmup[0].inputs["X"].dims) == [5]


def test_a_sample_without_a_graph_input_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match="the model's input 'INPUT1' is not in the sample"):
        export(add_sub_model(), {"INPUT0": np.ones((2, 16))}, repository=tmp_path, name="add-sub")
    assert list(tmp_path.iterdir()) == []


def test_one_array_for_several_inputs_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match=r"inputs \['INPUT0', 'INPUT1'\]: give the sample as a mapping"):
        export(add_sub_model(), np.ones((2, 16)), repository=tmp_path, name="add-sub")


def test_a_file_that_is_not_onnx_is_refused(tmp_path: Path) -> None:
    bogus = tmp_path / "model.onnx"
    bogus.write_bytes(b"\x00not a protobuf\xff" * 10)
    with pytest.raises(ExportError, match="is not an ONNX model"):
        export(bogus, np.ones((1, 4)), repository=tmp_path / "models", name="bogus")
    with pytest.raises(ExportError, match="is not a file"):
        export(tmp_path / "missing.onnx", np.ones((1, 4)), repository=tmp_path / "models", name="bogus")
    assert not (tmp_path / "models").exists()


def test_an_unknown_kind_of_model_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match=r"scikit-learn estimator .* got builtins\.dict"):
        export({"weights": [1, 2]}, np.ones((1, 2)), repository=tmp_path, name="dict")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"name": "../escape"}, "is not a safe folder name"),
        ({"name": ".hidden"}, "is not a safe folder name"),
        ({"name": "my model"}, "is not a safe folder name"),
        ({"name": "ok", "version": 0}, "version must be a whole number of at least 1"),
        ({"name": "ok", "max_batch_size": -1}, "max_batch_size must be a whole number of at least 0"),
    ],
)
def test_bad_arguments_are_refused(tmp_path: Path, arguments: dict[str, object], message: str) -> None:
    with pytest.raises(ExportError, match=message):
        export(add_sub_model(), np.ones((1, 16)), repository=tmp_path, **arguments)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_an_empty_sample_is_refused(tmp_path: Path) -> None:
    empty = {"INPUT0": np.ones((0, 16)), "INPUT1": np.ones((0, 16))}
    with pytest.raises(ExportError, match="the sample's 'INPUT0' is empty"):
        export(add_sub_model(), empty, repository=tmp_path, name="add-sub")
    assert list(tmp_path.iterdir()) == []


def test_a_repository_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "models").write_text("not a folder")
    with pytest.raises(ExportError, match=r"repository '.*models' exists and is not a folder"):
        export(add_sub_model(), np.ones((1, 16)), repository=tmp_path / "models", name="add-sub")


def test_an_existing_config_that_does_not_parse_is_refused(tmp_path: Path) -> None:
    model_dir = tmp_path / "add-sub"
    model_dir.mkdir()
    (model_dir / "config.pbtxt").write_text("max_batch_size: eight\n")

    with pytest.raises(
        ExportError, match=r"config.pbtxt' exists but config.pbtxt does not parse.*fix or remove it"
    ):
        export(
            add_sub_model(),
            {"INPUT0": np.ones((1, 16)), "INPUT1": np.ones((1, 16))},
            repository=tmp_path,
            name="add-sub",
        )

    assert [p.name for p in tmp_path.rglob("*")] == ["add-sub", "config.pbtxt"]
