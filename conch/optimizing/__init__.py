"""Models made lighter for the devices that serve them: ``conch optimize --int8`` (see ``docs/edge.md``).

An fp32 ONNX version is quantized to int8 with ONNX Runtime, compared with the version it came from
on the release gate's figures, and written beside it as a new version, its quantized twin, only when
it agrees (``optimizer.optimize_int8``). Part of the toolchain: nothing here is imported by the
serving path, which reads the twin from the config (``conch.repository.quantized_twin``).

This module imports nothing heavy, so that ``conch``'s argument parser can show the default.
"""

#: Share of rows whose prediction must stay the same: a little below the release gate's 0.995,
#: because int8 is expected to move a few rows that sit on a decision boundary, not one in a hundred.
DEFAULT_MIN_AGREEMENT = 0.99
