"""From a notebook object to a servable model folder: ``export(model, sample, repository=, name=)``.

Importing this package needs only conch's own dependencies; skl2onnx and torch are imported when a
model of theirs is exported. See ``docs/export.md``.
"""

from conch.exporting.agreement import ATOL, RTOL, DisagreementError
from conch.exporting.errors import ConfigRewrittenWarning, ExportError
from conch.exporting.exporter import DEFAULT_MAX_BATCH_SIZE, export

__all__ = [
    "ATOL",
    "DEFAULT_MAX_BATCH_SIZE",
    "RTOL",
    "ConfigRewrittenWarning",
    "DisagreementError",
    "ExportError",
    "export",
]
