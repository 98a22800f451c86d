"""Versions a release rejected, as the loader keeps them out.

The record of a rejection lives in ``release/`` (:mod:`conch.release.verdicts`); the lifecycle gets the
rejected versions of a model as an argument and needs only their reason and whether they still apply to
a folder's content, which :class:`RejectedVersion` describes.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from conch.lifecycle.fingerprint import content_fingerprint
from conch.observability.events import emit

log = logging.getLogger(__name__)


class RejectedVersion(Protocol):
    """A version a release rejected, as the lifecycle needs it (the record lives in ``release/``)."""

    @property
    def reason(self) -> str: ...

    def applies_to(self, fingerprint: str | None) -> bool: ...


def still_rejected(folder: Path, rejected: Mapping[int, RejectedVersion]) -> dict[int, str]:
    """The rejected versions whose folder holds the content that was rejected, with the reason.

    A folder that now holds other content (re-exported under the same number) is no longer the
    rejected version: it loads, and the log says what happened.
    """
    kept_out = {}
    for number, rejection in sorted(rejected.items()):
        version_dir = folder / str(number)
        if not version_dir.is_dir():
            continue
        if rejection.applies_to(content_fingerprint(version_dir)):
            kept_out[number] = rejection.reason
        else:
            emit(
                log,
                "rejection_outdated",
                logging.WARNING,
                model=folder.name,
                version=number,
                reason=f"version {number} was rejected ({rejection.reason}), but its folder now holds other "
                "content, so the rejection does not apply to it",
            )
    return kept_out


def rejected_note(rejected: Mapping[int, str]) -> str:
    """`` (rejected by a release ...: versions 3, 5)`` for a reason, or nothing when none is rejected."""
    if not rejected:
        return ""
    numbers = ", ".join(str(n) for n in sorted(rejected))
    return f" (rejected by a release and kept out: version{'s' if len(rejected) > 1 else ''} {numbers})"
