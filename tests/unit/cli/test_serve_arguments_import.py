"""Parsing ``conch serve``'s flags must not import gRPC.

``conch.cli.main`` sets gRPC's experiments (``prefer_iomgr_listener``) after parsing and before gRPC is
imported, because gRPC reads them once, at import; an argument type that imported gRPC earlier (the
``--fallback-strategy`` check once did, through ``tritonclient``) silently kept the slower listener
and cost about a fifth of the gRPC throughput (7,700 against 6,100 inferences/s for the bench's tiny
model at 32 clients).
"""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
from conch.cli.main import build_parser
build_parser().parse_args([
    "serve", "--fallback-strategy", "MODEL->CPU->BUSINESS", "--log-format", "json", "--log-level", "verbose",
    "--circuit-breaker", "true", "--model-control-mode", "poll", "--health-max-memory-ratio", "0.9",
    "--circuit-breaker-config", "open_seconds=10,minimum_calls=5",
])
print(sorted(name for name in ("grpc", "tritonclient", "onnxruntime") if name in sys.modules))
"""


def test_parsing_every_kind_of_serve_flag_imports_neither_grpc_nor_tritonclient() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60)

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
