"""Quantizing leaves nothing in the user's working folder, even where ONNX Runtime's symbolic shape
inference stops short (it then saves the half-inferred graph as sym_shape_infer_temp.onnx in the
working folder)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from conch.optimizing.quantization import _pre_processed


def unshaped_model(path: Path) -> Path:
    """A MatMul then an operator of an unknown domain, whose output shape nobody can infer."""
    weight = numpy_helper.from_array(np.ones((4, 8), np.float32), "W")
    nodes = [
        helper.make_node("MatMul", ["X", "W"], ["H"]),
        helper.make_node("Mystery", ["H"], ["Y"], domain="example.unknown"),
    ]
    graph = helper.make_graph(
        nodes,
        "unshaped",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
        [weight],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("example.unknown", 1)]
    )
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_pre_processing_that_stops_short_leaves_the_working_folder_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = unshaped_model(tmp_path / "model.onnx")
    working = tmp_path / "working"
    working.mkdir()
    monkeypatch.chdir(working)

    used = _pre_processed(source, tmp_path / "prepared.onnx")

    assert used == source, "without pre-processing, quantization goes on from the original graph"
    assert list(working.iterdir()) == []
    assert Path.cwd() == working
