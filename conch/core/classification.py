"""Triton's classification extension: an output answered as its top-K classes instead of its values.

A client asks with the ``classification`` parameter of a requested output (tritonclient's
``InferRequestedOutput(name, class_count=K)``). The output becomes BYTES of shape ``[batch, K]`` for a
batching model (one top-K per row) or ``[K]`` for a model without batching (the whole tensor ranked as
one), each element ``"score:index"`` or ``"score:index:label"``, highest score first. As Triton prints
them, floating-point scores have six decimals (C's ``%f``) and integer scores none; K larger than the
classes gives every class. Ties keep the lower index first (Triton's sort leaves their order open).
Labels are the lines of the output's ``label_filename``: in the serving version's folder when it has
that file (``conch export`` writes one per version, since versions may know different classes), else
in the model folder, where Triton reads it.

This module is the one place that ranks; the frontends only read the parameter and encode the result.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np

from conch.core import datatypes
from conch.core.errors import InvalidArgumentError, UnavailableError

#: Datatypes Triton ranks: every integer and the two wide floats (not BOOL, FP16, BF16 or BYTES).
RANKED = frozenset(["INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64", "FP32", "FP64"])
#: Triton's bound on one ranked tensor, against pathological memory and CPU use.
MAX_ELEMENTS = 1_000_000


def class_count(output: str, value: object) -> int:
    """The ``classification`` parameter of output ``output``: a whole number of classes, at least 1."""
    if type(value) is not int or value < 1:
        raise InvalidArgumentError(
            f"invalid value for 'classification' parameter of output '{output}': expected a whole "
            f"number of classes >= 1, got {value!r}"
        )
    return value


def top_k(
    output: str, values: np.ndarray, count: int, batching: bool, labels: list[str] | None = None
) -> np.ndarray:
    """``values`` ranked: an object array of ``b"score:index[:label]"``, shape [batch, K] or [K]."""
    datatype = datatypes.from_numpy(values.dtype).name
    if datatype not in RANKED:
        raise InvalidArgumentError(
            f"class result not available for output '{output}' due to unsupported type '{datatype}': "
            f"classification ranks {', '.join(sorted(RANKED))} outputs"
        )
    rows = values.reshape(values.shape[0], -1) if batching and values.ndim > 0 else values.reshape(1, -1)
    if rows.shape[1] > MAX_ELEMENTS:
        raise InvalidArgumentError(
            f"classification output tensor too large: output '{output}' has {rows.shape[1]} classes "
            f"per row, at most {MAX_ELEMENTS} are ranked"
        )
    k = min(count, rows.shape[1])
    text = _integer_text if values.dtype.kind in "iu" else _float_text
    ranked = np.empty((rows.shape[0], k), dtype=object)
    for r, row in enumerate(rows):
        for c, index in enumerate(_descending(row)[:k]):
            entry = f"{text(row[index])}:{index}"
            if labels is not None and index < len(labels):
                entry += f":{labels[index]}"
            ranked[r, c] = entry.encode()
    return ranked if batching and values.ndim > 0 else ranked.reshape(k)


def labels_for(
    model_folder: Path, label_filename: str, model: str, version_folder: Path | None = None
) -> list[str] | None:
    """The labels of an output (None when it names no file), read once per change of the file.

    ``version_folder``'s own file comes first. The file must lie inside the model folder; errors name
    it as the config does, never a server path.
    """
    if not label_filename:
        return None
    relative = Path(label_filename)
    if relative.is_absolute() or ".." in relative.parts:
        raise UnavailableError(
            f"model '{model}': label_filename '{label_filename}' must name a file inside the model folder"
        )
    path = model_folder / relative
    if version_folder is not None and (version_folder / relative).is_file():
        path = version_folder / relative
    try:
        status = path.stat()
    except OSError:
        raise UnavailableError(
            f"model '{model}': its label_filename '{label_filename}' is not a file in the model folder"
        ) from None
    return list(_read_labels(str(path), status.st_mtime_ns, status.st_size))


@lru_cache(maxsize=256)
def _read_labels(path: str, mtime_ns: int, size: int) -> tuple[str, ...]:
    # The modification time and size are part of the key, so an edited file is read again.
    with open(path, encoding="utf-8", errors="replace") as lines:
        return tuple(line.rstrip("\r\n") for line in lines)


def _descending(row: np.ndarray) -> np.ndarray:
    """Indices from the highest value to the lowest; equal values keep their order (lower index first)."""
    reverse = np.argsort(row[::-1], kind="stable")[::-1]
    return len(row) - 1 - reverse


def _float_text(value: np.generic) -> str:
    return "%f" % float(value)  # noqa: UP031 - C's %f is the format Triton's scores have


def _integer_text(value: np.generic) -> str:
    return str(int(value))
