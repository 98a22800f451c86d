"""Samples as named arrays: what a notebook hands to ``export``, and what ONNX Runtime is fed.

A sample is a 2-D numpy array (one model input), a pandas DataFrame (one input per column, named by
the column, as a ``[-1, 1]`` tensor; ``conch.exporting.column_names`` renames the columns whose names
are not tensor names), or a mapping of input name to array (an ``.npz`` file). Whatever
the framework, the exported graph's own signature decides the dtype each array is fed as, so the
check against the original and the warm-up file see exactly what a client would send.

ONNX string tensors cannot hold a missing value, so a missing category (None, NaN) travels as the
empty string; the check against the original then shows whether the pipeline treats both alike.
"""

from __future__ import annotations

import math
import sys
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from conch.backends.signature import ModelSignature
from conch.core import datatypes
from conch.exporting.errors import ExportError

#: Input name given to a sample that is one array.
SINGLE_INPUT = "input"
#: Sample files: one array (``.npy``) or one array per input or column (``.npz``).
SAMPLE_SUFFIXES = (".npy", ".npz")
#: pandas dtypes (besides dates, durations and complex numbers) with no ONNX tensor type.
_UNTENSORABLE_DTYPES = ("PeriodDtype", "IntervalDtype")


class SampleFileError(ExportError):
    """A sample file that cannot be read, or (``usage``) that is missing or not .npy or .npz."""

    def __init__(self, message: str, usage: bool = False) -> None:
        super().__init__(message)
        self.usage = usage


def read_sample_file(path: Path) -> np.ndarray | dict[str, np.ndarray]:
    """A ``.npy`` file's array, or an ``.npz`` file's arrays by name, loaded without pickle.

    Without pickle, because a sample file comes from anywhere and unpickling runs code; so strings
    must be numpy unicode arrays (``dtype=str``). ``conch export`` and ``conch optimize`` read
    their samples here.
    """
    if not path.is_file():
        raise SampleFileError(f"sample file '{path}' does not exist", usage=True)
    if path.suffix.lower() not in SAMPLE_SUFFIXES:
        raise SampleFileError(f"sample '{path}' must be .npy (one array) or .npz (named arrays)", usage=True)
    try:
        if path.suffix.lower() == ".npy":
            return np.load(path, allow_pickle=False)
        with np.load(path, allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        raise SampleFileError(
            f"cannot read sample '{path}': {exc}. Strings must be saved as numpy unicode arrays "
            "(dtype=str), which load without pickle"
        ) from None


def is_data_frame(sample: Any) -> bool:
    """Whether ``sample`` is a pandas DataFrame, without importing pandas (it is not a dependency)."""
    pandas = sys.modules.get("pandas")
    return pandas is not None and isinstance(sample, pandas.DataFrame)


def frame_columns(frame: Any) -> dict[str, np.ndarray]:
    """One ``[rows, 1]`` array per DataFrame column, keyed by the column's name as text.

    numpy integers stay integers. Other numbers, booleans and pandas' nullable dtypes (``Int64``,
    ``boolean``) become floats with NaN for a missing value, whether or not the sample happens to
    miss one, so a column's tensor type depends on its dtype alone. A ``category`` column is its
    categories' kind (numbers or text); ``string`` and ``object`` columns are text. Dates, durations
    and complex numbers have no ONNX tensor type a pipeline could take, so they are refused by name.
    """
    from pandas.api import types

    names = [str(name) for name in frame.columns]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ExportError(
            f"the sample has more than one column named {repeated}; give each column its own name"
        )
    columns = {}
    for position, name in enumerate(names):
        series = frame.iloc[:, position]
        dtype = series.dtype
        if isinstance(dtype, types.CategoricalDtype):
            series = series.astype(dtype.categories.dtype if len(dtype.categories) else object)
            dtype = series.dtype
        columns[name] = _column_values(name, series, dtype, types).reshape(-1, 1)
    return columns


def _column_values(name: str, series: Any, dtype: Any, types: Any) -> np.ndarray:
    if dtype.kind in "mMc" or type(dtype).__name__ in _UNTENSORABLE_DTYPES:
        raise ExportError(
            f"column '{name}' is {dtype}, which an ONNX model cannot take; convert it in the frame "
            "before fitting, for example to numbers (Unix seconds: frame[col].astype('int64') // 10**9, "
            "or date parts such as .dt.dayofweek), then export the pipeline fitted on that frame"
        )
    if isinstance(dtype, np.dtype) and dtype.kind in "iu":
        return series.to_numpy(dtype=np.int64)
    if types.is_numeric_dtype(dtype) or types.is_bool_dtype(dtype):
        return series.to_numpy(dtype=np.float64, na_value=np.nan)
    return _text_array(series.tolist())


def mapping_frame(sample: Mapping[str, Any]) -> Any:
    """A DataFrame from named 1-D (or ``[rows, 1]``) arrays, for a pipeline fitted on a DataFrame."""
    try:
        import pandas
    except ImportError:
        raise ExportError("a sample of named arrays needs pandas for a scikit-learn model") from None
    return pandas.DataFrame({name: np.asarray(values).reshape(-1) for name, values in sample.items()})


def graph_feeds(signature: ModelSignature, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The sample cast to each graph input's dtype; a graph input the sample lacks is an error."""
    feeds = {}
    for tensor in signature.inputs:
        if tensor.name not in arrays:
            raise ExportError(
                f"the model's input '{tensor.name}' is not in the sample; the sample has {sorted(arrays)}"
            )
        array = np.asarray(arrays[tensor.name])
        if array.size == 0:
            raise ExportError(f"the sample's '{tensor.name}' is empty: export needs at least one row")
        feeds[tensor.name] = _cast(tensor.name, array, tensor.datatype)
    return feeds


def _cast(name: str, array: np.ndarray, datatype: str) -> np.ndarray:
    if datatype == "BYTES":
        return _text_array(array.ravel().tolist()).reshape(array.shape)
    try:
        return array.astype(datatypes.from_name(datatype).numpy, copy=False)
    except (TypeError, ValueError):
        raise ExportError(
            f"input '{name}' is {datatype} in the model but the sample holds {array.dtype} values"
        ) from None


def _text_array(values: list[Any]) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = ["" if is_missing(v) else v.decode() if isinstance(v, bytes) else str(v) for v in values]
    return out


def is_missing(value: Any) -> bool:
    """None, float NaN or pandas' NA: what a frame holds for a missing value."""
    # None, float NaN and pandas' NA (whose truth value raises, so it is recognised by its type name).
    return (
        value is None
        or (isinstance(value, float | np.floating) and math.isnan(value))
        or type(value).__name__ == "NAType"
    )
