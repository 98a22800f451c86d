"""``--reference FILE`` for ``conch export``, ``conch validate`` and ``conch package``: the rows on which a
version is compared with the version before it, so the release gate knows the agreement to expect
(:mod:`conch.validation.expected_agreement`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

HELP = (
    "a few hundred real input rows (.csv, .parquet, .npy or .npz): compare the version with the last "
    "promoted (else highest non-rejected) other version on them and record the agreement in its "
    "metadata.json, for the release gate's default min_agreement"
)


def add_reference_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--reference", type=Path, metavar="FILE", help=HELP)


def record_reference(model_dir: Path, version: int | None, reference: Path, store: str | None = None) -> str:
    """Measure and record the expected agreement of ``version`` (default: the highest); the line to
    print. Raises ``ReferenceError`` with the reason when it cannot be measured."""
    from conch.repository.version_policy import version_folders
    from conch.validation.agreement_interval import ReferenceError
    from conch.validation.expected_agreement import record_expected_agreement

    numbers = version_folders(model_dir)
    number = version if version is not None else (numbers[-1] if numbers else None)
    if number is None or number not in numbers:
        raise ReferenceError(f"'{model_dir}' has no version folder {number if number else ''}".rstrip())
    found: Any = record_expected_agreement(model_dir, number, reference, store)
    if found is None:
        return f"version {number}: no other version to compare with; the gate will use its default"
    return (
        f"version {number} agrees with version {found.against_version} on {found.value:.2%} of "
        f"{found.rows} reference rows [{found.lower:.2%}, {found.upper:.2%}]: recorded in metadata.json"
    )
