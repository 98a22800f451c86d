"""Client helpers for calling a conch (or Triton) server from a notebook, a service or the CLI.

``infer_frame(url, model, frame)`` sends a pandas DataFrame to a model and returns its outputs as a
DataFrame; it needs pandas, which conch itself does not install. :mod:`conch.client.releases` drives a
server's release API with the standard library alone.

``infer_frame`` is imported on first use: it brings numpy and tritonclient, which ``conch release``
(a client of this package too) does not need on every call.
"""

from __future__ import annotations

from typing import Any

__all__ = ["infer_frame"]


def __getattr__(name: str) -> Any:
    if name == "infer_frame":
        from conch.client.frames import infer_frame

        return infer_frame
    raise AttributeError(f"module 'conch.client' has no attribute '{name}'")
