"""What the router asks of the releases, and reports to them: the one port between the two rooms.

The router does not import ``release/``: it is handed an object with these methods (the release
controller) and works the same without one (no release is ever active then).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np


class RouterReleases(Protocol):
    """The releases as the request path sees them."""

    def split(self, model: str) -> tuple[int, int, int] | None:
        """``(baseline, candidate, candidate's percent)`` for requests that name no version, or None
        when no release decides."""

    def shadow_version(self, model: str, answered: int) -> int | None:
        """The version a copy of an answer by ``answered`` runs on, off the client's path, or None."""

    def record_answer(
        self,
        model: str,
        version: int,
        seconds: float,
        server_error: bool,
        copy: bool = False,
        execution: float | None = None,
    ) -> None:
        """One answer of a release's version (``copy``: a shadow copy's), for the gate: ``seconds``
        the version spent on it, ``execution`` the seconds of the execution that answered it."""

    def compare_copy(
        self,
        model: str,
        answered: int,
        answer: Mapping[str, np.ndarray],
        copy_answer: Mapping[str, np.ndarray],
        datatypes: Mapping[str, str],
        asked: Sequence[str],
    ) -> None:
        """Both answers of a copied request (the one clients got, by ``answered``, and the copy's)."""

    def record_dropped(self, model: str) -> None:
        """A copy not run: too many were running."""
