"""``pb_utils.TritonError`` and ``TritonModelException``, shared by the modules of the model's API."""

from __future__ import annotations


class TritonError(Exception):
    """An error a model returns in a response (or raises); ``code`` is one of the class constants."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    def __init__(self, message: str, code: int = INTERNAL) -> None:
        super().__init__(message)
        self._message = str(message)
        self._code = int(code)

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code


class TritonModelException(Exception):
    """Raised by this module's calls that fail (and by models, to fail a whole ``execute``)."""
