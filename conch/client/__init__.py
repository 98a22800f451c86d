"""Client helpers for calling a conch (or Triton) server from a notebook or a service.

``infer_frame(url, model, frame)`` sends a pandas DataFrame to a model and returns its outputs as a
DataFrame; it needs pandas, which conch itself does not install.
"""

from conch.client.frames import infer_frame

__all__ = ["infer_frame"]
