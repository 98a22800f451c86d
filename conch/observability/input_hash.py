"""``input_hash``: one sha256 that names a request's inputs in a log record, without the inputs.

A record must say which input a prediction came from, so that a complaint ("this row was scored
0.93") can be matched to its log line, and the same input sent twice is seen as the same; but a log
must never hold the input itself. The hash is over the inputs in request order; for each: its name,
NUL, its datatype, NUL, its shape as comma-separated decimals, NUL, then its raw bytes, little-endian,
BYTES elements as Triton's binary format writes them (a 4-byte little-endian length, then the bytes).
docs/observability.md gives the same rule as a Python snippet a user can run.

The hash is of the decoded tensors, so a request sent as JSON, in the binary extension, over gRPC or
through shared memory hashes the same when its values are the same.

Why no copies: this runs on the request path, so each tensor's buffer goes to ``hashlib`` as it lies
(numpy arrays export their buffer); only a non-contiguous or big-endian array, which no frontend
builds, is copied first.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable
from typing import Any

import numpy as np

from conch.core.types import Tensor

_LENGTH = struct.Struct("<I")


def input_hash(inputs: Iterable[Tensor]) -> str:
    """The sha256, in hex, of ``inputs`` (a request's, in its order) by the rule above."""
    digest = hashlib.sha256()
    for tensor in inputs:
        _feed(digest, tensor)
    return digest.hexdigest()


def tensor_hash(tensor: Tensor) -> str:
    """The hash of one tensor alone: what an audit record holds in place of a redacted input."""
    return input_hash((tensor,))


def _feed(digest: Any, tensor: Tensor) -> None:
    data = tensor.data
    shape = ",".join(map(str, data.shape))
    digest.update(f"{tensor.name}\0{tensor.datatype}\0{shape}\0".encode())
    if data.dtype == object or data.dtype.kind in ("U", "S"):
        for element in data.reshape(-1).tolist():
            value = element.encode() if isinstance(element, str) else bytes(element)
            digest.update(_LENGTH.pack(len(value)))
            digest.update(value)
        return
    if data.dtype.byteorder == ">":
        data = data.astype(data.dtype.newbyteorder("<"))
    digest.update(np.ascontiguousarray(data))
