"""Seed inputs for ``bench.fuzz.http_decoders``, one per reader, in its framing (byte 0: the reader,
byte 1: the header's length, then the header and the body)::

    .venv/bin/python -m bench.fuzz.seeds bench/fuzz/corpus
"""

from __future__ import annotations

import gzip
import json
import sys
import zlib
from pathlib import Path

_INFER = {
    "inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]},
        {"name": "S", "datatype": "BYTES", "shape": [2], "data": ["a", "b"]},
    ],
    "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True, "classification": 2}}],
    "parameters": {"sequence_id": 3},
}
_BINARY = {
    "inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": [1, 2], "parameters": {"binary_data_size": 8}},
        {"name": "B", "datatype": "BYTES", "shape": [1], "parameters": {"binary_data_size": 7}},
    ]
}
_CONFIG = {
    "max_batch_size": 4,
    "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [4]}],
    "dynamic_batching": {"preferred_batch_size": [2]},
}


def seeds() -> dict[str, bytes]:
    document = json.dumps(_INFER).encode()
    header = json.dumps(_BINARY).encode()
    length = str(len(header)).encode()
    return {
        "json": bytes([0, 0]) + document,
        "binary": bytes([1, len(length)]) + length + header + b"\0" * 8 + b"\3\0\0\0abc",
        "gzip": bytes([2, 4]) + b"gzip" + gzip.compress(document),
        "deflate": bytes([2, 7]) + b"deflate" + zlib.compress(document),
        "depth": bytes([3, 0]) + b'{"inputs":[{"data":[[[1]]],"parameters":{"a":[[{"b":1}]]}}]}',
        "config": bytes([4, 0]) + json.dumps({"parameters": {"config": json.dumps(_CONFIG)}}).encode(),
    }


def main() -> int:
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "bench/fuzz/corpus")
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in seeds().items():
        (folder / f"seed-{name}").write_bytes(data)
    print(f"{len(seeds())} seeds in {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
