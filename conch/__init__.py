"""conch: a Triton-compatible model server in Python.

The package is layered as ARCHITECTURE.md describes: ``frontends`` translate wire formats into ``core``
types, ``scheduling`` decides when a request runs, ``backends`` compute, ``repository`` finds and loads
models. Nothing here imports the CLI.
"""

__version__ = "0.1.0"
