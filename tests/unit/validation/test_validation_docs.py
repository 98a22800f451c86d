"""docs/validation.md documents every finding code ``conch validate`` can report, and no other."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SOURCES = [
    *sorted((ROOT / "conch" / "validation").glob("*.py")),
    ROOT / "conch/repository/config_validation.py",
    ROOT / "conch/repository/sequence_config.py",
    ROOT / "conch/repository/sequence_config_checks.py",
]
NOT_CODES = {"utf-8"}  # other kebab-case strings in those files


def test_every_finding_code_has_an_entry() -> None:
    in_source = {
        code
        for path in SOURCES
        for code in re.findall(r'"([a-z0-9]+(?:-[a-z0-9]+)+)"', path.read_text())
        if code not in NOT_CODES
    }
    documented = re.findall(
        r"^#### `([a-z0-9-]+)` \((?:error|warning|info)\)$", (ROOT / "docs/validation.md").read_text(), re.M
    )

    assert len(in_source) > 30
    assert sorted(documented) == sorted(in_source)
