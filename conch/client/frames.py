"""``infer_frame``: a pandas DataFrame in, a DataFrame of the model's outputs out, over HTTP or gRPC.

A model exported from a DataFrame has one input per column. Calling it with ``tritonclient`` means one
``InferInput`` per column, each with the right name, datatype and shape: 14 of them for ``load_wine``.
This helper reads the model's metadata and config once and builds them from the frame:

- each input is found by its own name among the columns, or by the column it was renamed from (the
  config's ``conch.column_inputs``, see ``conch.core.input_aliases``);
- a model with one 2-D input (``[-1, N]``) takes the whole frame, when it has ``N`` columns;
- values are cast to the input's datatype; text goes as BYTES, a missing value as the empty string,
  as ``conch.export`` fed it;
- a frame longer than ``max_batch_size`` is sent in several requests.

Each output becomes one column (``[rows, 1]`` outputs) or several named ``<output>_<i>``, or
``<output>_<class>`` when the output has labels (a classifier's probabilities, see ``class_columns``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from tritonclient.utils import triton_to_np_dtype

from conch.client.class_columns import class_labels, served_version
from conch.core.input_aliases import COLUMN_INPUTS_PARAMETER, aliases_from_json, input_aliases
from conch.exporting.samples import frame_columns

_PROTOCOLS = ("http", "grpc")


@dataclass(frozen=True)
class ModelInput:
    """One input as the model's metadata shows it."""

    name: str
    datatype: str
    shape: list[int]


@dataclass(frozen=True)
class ModelInterface:
    """What ``infer_frame`` needs to know about a model, read once per call."""

    inputs: list[ModelInput]
    outputs: list[str]
    max_batch_size: int
    column_inputs: dict[str, str]
    labelled: frozenset[str] = frozenset()


def infer_frame(
    url: str,
    model: str,
    frame: Any,
    *,
    version: str = "",
    protocol: str | None = None,
    outputs: list[str] | None = None,
) -> Any:
    """The model's outputs for every row of ``frame``, as a DataFrame with the frame's index.

    ``url`` is ``host:port``, or ``http://host:port`` / ``grpc://host:port``, which set the protocol
    (``protocol`` does too; HTTP by default). ``outputs`` limits the outputs asked for. Errors from
    the server arrive as ``tritonclient.utils.InferenceServerException`` with the server's message.
    """
    import pandas

    if len(frame) == 0:
        raise ValueError("the frame has no rows")
    protocol, address = _split_url(url, protocol)
    client_module = _client_module(protocol)
    client = client_module.InferenceServerClient(address)
    try:
        interface = _interface(client, protocol, model, version)
        feeds = _feeds(interface, frame)
        wanted = outputs or interface.outputs
        rows = len(frame)
        step = interface.max_batch_size or rows
        pieces: dict[str, list[np.ndarray]] = {name: [] for name in wanted}
        for start in range(0, rows, step):
            batch = {name: values[start : start + step] for name, values in feeds.items()}
            result = client.infer(
                model,
                _infer_inputs(client_module, interface, batch),
                model_version=version,
                outputs=[client_module.InferRequestedOutput(name) for name in wanted],
            )
            for name in wanted:
                pieces[name].append(result.as_numpy(name))
        first_row = _infer_inputs(client_module, interface, {n: v[:1] for n, v in feeds.items()})
        names = {
            name: class_labels(client, client_module, model, served_version(result), first_row, name, width)
            for name in wanted
            if name in interface.labelled and (width := int(np.prod(pieces[name][0].shape[1:]))) > 1
        }
    finally:
        client.close()
    return pandas.DataFrame(_output_columns(pieces, rows, names), index=frame.index)


def _split_url(url: str, protocol: str | None) -> tuple[str, str]:
    scheme, separator, rest = url.partition("://")
    if separator:
        if protocol is not None and protocol != scheme:
            raise ValueError(f"url '{url}' says {scheme} but protocol='{protocol}'")
        protocol, url = scheme, rest
    protocol = protocol or "http"
    if protocol not in _PROTOCOLS:
        raise ValueError(f"protocol must be one of {list(_PROTOCOLS)}, got '{protocol}'")
    return protocol, url.rstrip("/")


def _client_module(protocol: str) -> Any:
    if protocol == "grpc":
        import tritonclient.grpc as grpcclient

        return grpcclient
    import tritonclient.http as httpclient

    return httpclient


def _interface(client: Any, protocol: str, model: str, version: str) -> ModelInterface:
    if protocol == "grpc":
        metadata = client.get_model_metadata(model, version)
        config = client.get_model_config(model, version).config
        inputs = [ModelInput(t.name, t.datatype, [int(d) for d in t.shape]) for t in metadata.inputs]
        return ModelInterface(
            inputs,
            [t.name for t in metadata.outputs],
            config.max_batch_size,
            input_aliases(config),
            frozenset(entry.name for entry in config.output if entry.label_filename),
        )
    metadata = client.get_model_metadata(model, version)
    config = client.get_model_config(model, version)
    parameter = (config.get("parameters") or {}).get(COLUMN_INPUTS_PARAMETER) or {}
    inputs = [ModelInput(t["name"], t["datatype"], [int(d) for d in t["shape"]]) for t in metadata["inputs"]]
    return ModelInterface(
        inputs,
        [t["name"] for t in metadata["outputs"]],
        int(config.get("max_batch_size", 0)),
        aliases_from_json(str(parameter.get("string_value", ""))),
        frozenset(entry["name"] for entry in config.get("output", []) if entry.get("label_filename")),
    )


def _feeds(interface: ModelInterface, frame: Any) -> dict[str, np.ndarray]:
    """Each input's values for all rows, cast to its datatype, with the model's shape."""
    columns = frame_columns(frame)
    by_input = {
        name: columns[column] for column, name in interface.column_inputs.items() if column in columns
    }
    for column, values in columns.items():
        by_input.setdefault(column, values)
    missing = [t.name for t in interface.inputs if t.name not in by_input]
    if missing and len(interface.inputs) == 1 and len(interface.inputs[0].shape) == 2:
        only = interface.inputs[0]
        if only.shape[1] in (-1, len(columns)):
            return {only.name: _cast(np.hstack(list(columns.values())), only.datatype)}
        raise ValueError(
            f"the model's input '{only.name}' has shape {only.shape} but the frame has {len(columns)} "
            f"columns; give it {only.shape[1]} columns"
        )
    if missing:
        raise ValueError(
            f"the frame has no column for the model's input(s) {missing}; its columns are {list(columns)}"
        )
    return {
        t.name: _cast(by_input[t.name], t.datatype).reshape(_row_shape(t, len(frame)))
        for t in interface.inputs
    }


def _row_shape(tensor: ModelInput, rows: int) -> list[int]:
    return [rows, *[1 if d == -1 else d for d in tensor.shape[1:]]]


def _cast(values: np.ndarray, datatype: str) -> np.ndarray:
    if datatype == "BYTES":
        return np.array([str(v).encode() for v in values.ravel()], dtype=object).reshape(values.shape)
    return values.astype(triton_to_np_dtype(datatype))


def _infer_inputs(client_module: Any, interface: ModelInterface, batch: dict[str, np.ndarray]) -> list[Any]:
    requests = []
    for tensor in interface.inputs:
        values = batch[tensor.name]
        request = client_module.InferInput(tensor.name, list(values.shape), tensor.datatype)
        request.set_data_from_numpy(values)
        requests.append(request)
    return requests


def _output_columns(
    pieces: dict[str, list[np.ndarray]], rows: int, class_names: dict[str, list[str] | None]
) -> dict[str, np.ndarray]:
    columns: dict[str, np.ndarray] = {}
    for name, parts in pieces.items():
        values = np.concatenate(parts).reshape(rows, -1)
        if values.dtype == object:
            values = np.vectorize(lambda v: v.decode() if isinstance(v, bytes) else v, otypes=[object])(
                values
            )
        if values.shape[1] == 1:
            columns[name] = values[:, 0]
        else:
            labels = class_names.get(name) or [str(i) for i in range(values.shape[1])]
            columns.update({f"{name}_{label}": values[:, i] for i, label in enumerate(labels)})
    return columns
