"""The example repository ``conch serve`` serves when given none."""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def embedded_repository() -> Path:
    """The example repository shipped inside the package (``examples/model_repository`` in the source)."""
    try:
        return Path(str(resources.files("conch.examples") / "model_repository"))
    except ModuleNotFoundError:
        return Path(__file__).resolve().parents[2] / "examples" / "model_repository"
