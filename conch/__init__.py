"""conch: a Triton-compatible model server in Python.

The package is layered as ARCHITECTURE.md describes: ``frontends`` translate wire formats into ``core``
types, ``scheduling`` decides when a request runs, ``backends`` compute, ``repository`` finds and loads
models. Nothing here imports the CLI. ``conch.export(model, sample, ...)`` turns a notebook model into a
validated, versioned model folder (see ``conch.exporting``).
"""

from typing import Any

from conch.core.version import VERSION as __version__

__all__ = ["__version__", "export"]


def __getattr__(name: str) -> Any:
    # ``conch.export`` pulls in the exporters (skl2onnx, torch) only when a notebook asks for it, so
    # ``import conch`` stays light for the server.
    if name == "export":
        from conch.exporting import export

        return export
    raise AttributeError(f"module 'conch' has no attribute '{name}'")
