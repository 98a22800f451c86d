"""Estimators fitted directly on a DataFrame: one input per column, joined into the matrix they took.

``HistGradientBoostingClassifier().fit(frame, y)`` or ``make_pipeline(StandardScaler(), ...)`` sees
the frame as one matrix of numbers, while skl2onnx takes one graph input per initial type only when a
ColumnTransformer picks the columns. Such a model is converted with one matrix input, then given the
frame's interface: one ``[-1, 1]`` input per column, as every frame export has, each cast to float and
joined (``Concat``) into the matrix, in the frame's column order. Clients, ``infer_frame`` and the
server's input checks then see the same columns the notebook saw.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

from conch.exporting.errors import ExportError
from conch.exporting.sklearn_parts import first_step

#: The matrix input's name while the graph is built; no column can take it over.
MATRIX_INPUT = "conch_frame_matrix"


def takes_matrix(model: Any) -> bool:
    """Whether ``model`` reads a frame as a matrix: its first step does not pick columns itself."""
    from sklearn.compose import ColumnTransformer

    return not isinstance(first_step(model), ColumnTransformer)


def check_numeric(model: Any, columns: dict[str, np.ndarray]) -> None:
    """Refuse, by column, text columns that no matrix of numbers can hold."""
    text = [name for name, values in columns.items() if values.dtype.kind not in "fiub"]
    if text:
        raise ExportError(
            f"{type(model).__name__} was fitted on the frame as a matrix of numbers, but column(s) {text} "
            "hold text: encode them in the pipeline, e.g. make_pipeline(make_column_transformer("
            "(OneHotEncoder(handle_unknown='ignore'), [...]), remainder='passthrough'), model)"
        )


def join_columns(onnx_model: onnx.ModelProto, columns: dict[str, np.ndarray]) -> None:
    """Replace the graph's matrix input by one input per column, cast to float and concatenated."""
    graph = onnx_model.graph
    (matrix,) = [graph_input for graph_input in graph.input if graph_input.name == MATRIX_INPUT]
    graph.input.remove(matrix)
    nodes, parts = [], []
    for position, (name, values) in enumerate(columns.items()):
        kind = TensorProto.INT64 if values.dtype.kind in "iu" else TensorProto.FLOAT
        graph.input.append(helper.make_tensor_value_info(name, kind, [None, 1]))
        part = f"{MATRIX_INPUT}_{position}"
        nodes.append(helper.make_node("Cast", [name], [part], to=TensorProto.FLOAT))
        parts.append(part)
    nodes.append(helper.make_node("Concat", parts, [MATRIX_INPUT], axis=1))
    for offset, node in enumerate(nodes):
        graph.node.insert(offset, node)
