"""Tensor names for DataFrame columns: the column's own name where it is one, a cleaned one where not.

Real data frames have columns such as ``od280/od315_of_diluted_wines`` (``load_wine``),
``sepal length (cm)`` (``load_iris``) or plain integers. Each becomes one model input, and a name with
spaces, slashes, colons or a leading digit is awkward or broken where clients name tensors
(``perf_analyzer --shape name:dims`` splits at the colon; skl2onnx rewrites such names on its own).

The rule, applied in column order:

1. A name that is already a tensor name (letters, digits and ``_``, not starting with a digit: a
   Python identifier, so ``größe`` is one) is kept, and these are placed first, so that a good name
   never changes because of another column.
2. Any other name has each run of other characters replaced by one ``_``, with ``_`` trimmed from both
   ends; a name left starting with a digit (an integer column ``0``) gets ``column_`` before it, and a
   name left empty becomes ``column_<position>``.
3. A cleaned name already taken gets ``_2``, ``_3``... until it is free.

The mapping of the renamed columns is recorded in ``metadata.json`` and in the config's ``parameters``
(``conch.core.input_aliases``), so the server accepts the original names and a client can map a frame.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping

import onnx

_OTHER_CHARACTERS = re.compile(r"\W+")
_NOT_ASCII_WORD = re.compile(r"[^A-Za-z0-9_]+")


def is_tensor_name(name: str) -> bool:
    return name.isidentifier()


def tensor_names(columns: Iterable[str]) -> dict[str, str]:
    """Each column's tensor name, by column, in column order (columns must be distinct)."""
    columns = list(columns)
    taken = {column for column in columns if is_tensor_name(column)}
    names = {}
    for position, column in enumerate(columns):
        if is_tensor_name(column):
            names[column] = column
            continue
        base = _cleaned(column, position)
        name, suffix = base, 2
        while name in taken:
            name, suffix = f"{base}_{suffix}", suffix + 1
        taken.add(name)
        names[column] = name
    return names


def renamed(names: Mapping[str, str]) -> dict[str, str]:
    """Only the columns whose tensor name differs from the column: what needs recording."""
    return {column: name for column, name in names.items() if column != name}


def column_inputs_json(column_inputs: Mapping[str, str]) -> str:
    """The parameter's value: sorted, compact and readable (non-ASCII names kept as they are)."""
    return json.dumps(dict(column_inputs), sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def rename_graph_inputs(model: onnx.ModelProto, names: Mapping[str, str]) -> None:
    """Rename graph inputs (old name to new) and every use of them, subgraphs included, in place."""
    if not names:
        return
    for graph_input in model.graph.input:
        graph_input.name = names.get(graph_input.name, graph_input.name)
    _rename_uses(model.graph, names)


def _rename_uses(graph: onnx.GraphProto, names: Mapping[str, str]) -> None:
    for node in graph.node:
        for index, name in enumerate(node.input):
            if name in names:
                node.input[index] = names[name]
        for attribute in node.attribute:
            subgraphs = [attribute.g] if attribute.HasField("g") else []
            for subgraph in [*subgraphs, *attribute.graphs]:
                _rename_uses(subgraph, names)


def _cleaned(column: str, position: int) -> str:
    name = _OTHER_CHARACTERS.sub("_", column).strip("_")
    if name and not name.isidentifier() and not name[0].isdigit():
        name = _NOT_ASCII_WORD.sub("_", name).strip("_")  # word characters no identifier takes: "x²"
    if not name:
        return f"column_{position}"
    return f"column_{name}" if name[0].isdigit() else name
