"""Versions a release rejected, as ``conch validate`` and ``conch deploy`` report them.

They read the same release store the servers share (``--release-store``, ``CONCH_RELEASE_STORE``; by
default ``.conch-verdicts`` inside the repository, as ``conch serve`` uses it), so a person sees before a
deploy which version folders no server will serve. A rejection applies only while the folder holds the
content that was rejected; a folder re-exported with other content is reported as such.
"""

from __future__ import annotations

import os
from pathlib import Path

from conch.core.findings import Finding, Severity
from conch.lifecycle.fingerprint import content_fingerprint
from conch.release.verdict_store import VERDICTS_FOLDER, VerdictStore, VerdictStoreError
from conch.release.verdicts import ModelVerdicts, fold, readmit_hint

STORE_ENV = "CONCH_RELEASE_STORE"


def store_location(repository: Path, given: str | None) -> str | None:
    """The store to read: ``given``, else ``CONCH_RELEASE_STORE``, else the repository's own when it
    exists; None when there is none to read."""
    location = given or os.environ.get(STORE_ENV, "")
    if location:
        return location
    default = repository / VERDICTS_FOLDER
    return str(default) if default.is_dir() else None


def rejection_findings(folders: list[Path], location: str | None) -> list[Finding]:
    """One finding per version folder a release rejected (a warning: it will not serve), or one saying
    the store could not be read."""
    if location is None:
        return []
    try:
        verdicts = fold(VerdictStore(location).read())
    except VerdictStoreError as exc:
        hint = "check the store's location (--release-store) and, for s3://, the credentials"
        return [Finding("release-store-unreadable", Severity.WARNING, "", "", str(exc), hint)]
    findings = []
    for folder in folders:
        for number, rejection in sorted((verdicts.get(folder.name) or ModelVerdicts()).rejected.items()):
            version_dir = folder / str(number)
            if not version_dir.is_dir():
                continue
            if rejection.applies_to(content_fingerprint(version_dir)):
                message = f"version {number} was rejected ({rejection.reason}): no server serves it"
                hint = f"re-admit it with {readmit_hint(folder.name, number)}, or export a new version"
                findings.append(
                    Finding("rejected-version", Severity.WARNING, folder.name, f"{number}/", message, hint)
                )
            else:
                message = (
                    f"version {number} was rejected, but its folder now holds other content: the rejection "
                    "no longer applies and servers load it"
                )
                hint = "give the new content a new version number, so the rejected one stays recognisable"
                findings.append(
                    Finding(
                        "rejected-version-changed", Severity.INFO, folder.name, f"{number}/", message, hint
                    )
                )
    return findings
