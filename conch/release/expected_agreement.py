"""The agreement a candidate is expected to reach, measured before its release, and the limit it sets.

``conch export``, ``conch validate`` and ``conch package`` with a reference frame run the candidate and
the version before it on the same rows and record, in the candidate's ``metadata.json`` (its ``extra``
map, under :data:`METADATA_KEY`), the share of rows on which they agree with a 95% interval
(:mod:`conch.validation.expected_agreement` measures it). A gate that leaves ``min_agreement`` out then
uses that interval's lower bound less :data:`AGREEMENT_MARGIN`: a reference frame is a sample of the
traffic, not the traffic, and a 1% margin covers the gap seen between a few hundred reference rows and
live requests. Without a record against the release's baseline, :data:`DEFAULT_MIN_AGREEMENT` applies.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from conch.release.spec import DEFAULT_MIN_AGREEMENT

METADATA_KEY = "expected_agreement"
AGREEMENT_MARGIN = 0.01


@dataclass(frozen=True)
class ExpectedAgreement:
    """Agreement of a version with ``against_version`` on ``rows`` reference rows, with its interval;
    ``self_agreement`` is the version's agreement with itself run twice (its prediction noise)."""

    value: float
    lower: float
    upper: float
    rows: int
    against_version: int
    self_agreement: float = 1.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, body: object) -> ExpectedAgreement | None:
        """The record :meth:`to_json` wrote, None when there is none or it cannot be read."""
        if not isinstance(body, dict):
            return None
        try:
            found = cls(
                float(body["value"]),
                float(body["lower"]),
                float(body["upper"]),
                int(body["rows"]),
                int(body["against_version"]),
                float(body.get("self_agreement", 1.0)),
            )
        except (KeyError, TypeError, ValueError):
            return None
        rates = (found.value, found.lower, found.upper, found.self_agreement)
        return found if all(math.isfinite(r) and 0 <= r <= 1 for r in rates) else None


def read_expected(version_dir: Path) -> ExpectedAgreement | None:
    """The record in ``version_dir/metadata.json``, None when there is none."""
    try:
        body = json.loads((version_dir / "metadata.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    extra = body.get("extra") if isinstance(body, dict) else None
    return ExpectedAgreement.from_json(extra.get(METADATA_KEY)) if isinstance(extra, dict) else None


@dataclass(frozen=True)
class AgreementLimit:
    """The ``min_agreement`` a release uses, why, and the prediction noise subtracted from a limit that
    was not measured against the baseline."""

    limit: float
    source: str
    noise: float = 0.0


def agreement_limit(
    declared: float | None,
    expected: ExpectedAgreement | None,
    baseline: int,
    baseline_expected: ExpectedAgreement | None = None,
) -> AgreementLimit:
    """The release's ``min_agreement``: the declared one, else the candidate's record against
    ``baseline`` less the margin, else the default. A record's figure already holds both versions'
    noise; a declared or default limit is lowered by the noise the records know (0 when none)."""
    noise = sum(1 - record.self_agreement for record in (expected, baseline_expected) if record)
    if declared is not None:
        return AgreementLimit(declared, "release.yaml", noise)
    if expected is not None and expected.against_version == baseline:
        limit = max(0.0, expected.lower - AGREEMENT_MARGIN)
        source = (
            f"expected agreement {expected.value:.4g} [{expected.lower:.4g}, {expected.upper:.4g}] on "
            f"{expected.rows} rows against version {baseline}, less {AGREEMENT_MARGIN:g}"
        )
        return AgreementLimit(limit, source)
    why = (
        "no expected agreement recorded"
        if expected is None
        else (
            f"the recorded expected agreement is against version {expected.against_version}, not {baseline}"
        )
    )
    return AgreementLimit(DEFAULT_MIN_AGREEMENT, f"default {DEFAULT_MIN_AGREEMENT:g} ({why})", noise)
