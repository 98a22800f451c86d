"""``conch validate``: checks a model folder or a repository against everything the server and Triton
rely on, and reports :class:`Finding` objects instead of stopping at the first problem.

``validate_model`` and ``validate_path`` load on first use: they bring ONNX and ONNX Runtime with them,
and the server's config rules (``conch.repository.config_validation``) import this package's findings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from conch.core.findings import Finding, Severity

if TYPE_CHECKING:
    from conch.validation.model_folder import NotAModelOrRepositoryError, model_folders
    from conch.validation.validator import validate_model, validate_path

__all__ = [
    "Finding",
    "NotAModelOrRepositoryError",
    "Severity",
    "model_folders",
    "validate_model",
    "validate_path",
]
_LAZY = {
    "NotAModelOrRepositoryError": "conch.validation.model_folder",
    "model_folders": "conch.validation.model_folder",
    "validate_model": "conch.validation.validator",
    "validate_path": "conch.validation.validator",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'conch.validation' has no attribute '{name}'")
    import importlib

    return getattr(importlib.import_module(_LAZY[name]), name)
