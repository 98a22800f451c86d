"""What ``conch validate`` reports: one :class:`Finding` per problem, each with a stable code. In
``core`` because the server's own config checks (``repository/config_validation.py``) report the same
findings as the toolchain, which the serving rooms must not import."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Severity(enum.Enum):
    """``error`` fails validation (exit 1, no package); ``warning`` and ``info`` do not."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True)
class Finding:
    """One problem in one model: ``field`` names the exact place (``input[0].dims``, ``1/model.onnx``)."""

    code: str
    severity: Severity
    model: str
    field: str
    message: str
    hint: str

    @property
    def is_error(self) -> bool:
        return self.severity is Severity.ERROR
