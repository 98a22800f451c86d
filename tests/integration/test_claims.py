"""The claims check: ``conch serve --help``, ``docs/configuration.md`` and the tests cannot drift apart.

Every flag the installed ``conch serve --help`` lists must show its ``CONCH_*`` variable, have a row in
configuration.md's flags table naming that variable, and be set (by the flag or by its variable) in at
least one test under ``tests/``. Every ``CONCH_*`` variable that README.md or a guide in ``docs/``
names must be one conch reads: a flag's variable, or one the code under ``conch/`` reads by name.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.integration.server_process import conch_command

ROOT = Path(__file__).resolve().parents[2]
CONFIGURATION = ROOT / "docs" / "configuration.md"
VARIABLE = re.compile(r"\bCONCH_[A-Z0-9_]*[A-Z0-9]\b")
# A variable the code reads by name: CACHE_ENV = "CONCH_MODEL_CACHE_DIR", os.environ.get("CONCH_REPOSITORY").
LITERAL = re.compile(r"[\"'](CONCH_[A-Z0-9_]*[A-Z0-9])[\"']")
# An entry of argparse's listing starts two spaces in; its wrapped help is indented further.
ENTRY = re.compile(r"^  (?P<name>-{0,2}[a-z][\w-]*)")
# A row of the flags table: | `--http-port` | `CONCH_HTTP_PORT` | 8000 | |
ROW = re.compile(r"^\| `(?P<flag>--[a-z][\w-]*|REPOSITORY)`[^|]* \| `(?P<variable>CONCH_[A-Z0-9_]+)` \|")


def variable_of(flag: str) -> str:
    """The variable a flag's default is read from (``--grpc-port``: ``CONCH_GRPC_PORT``)."""
    return "CONCH_" + flag.removeprefix("--").replace("-", "_").upper()


@pytest.fixture(scope="module")
def help_entries() -> dict[str, str]:
    """``conch serve --help``'s entries, flag (or positional name) to its help text."""
    listing = subprocess.run(
        [conch_command(), "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={**os.environ, "COLUMNS": "200"},
    ).stdout
    entries: dict[str, str] = {}
    name = ""
    for line in listing.split("positional arguments:", 1)[1].splitlines():
        entry = ENTRY.match(line)
        if entry:
            name = entry.group("name").split(",")[0]
            entries[name] = line
        elif name and line.startswith("   "):
            entries[name] += " " + line.strip()
        else:
            name = ""
    entries.pop("-h", None)
    return entries


@pytest.fixture(scope="module")
def flags(help_entries: dict[str, str]) -> list[str]:
    listed = [name for name in help_entries if name.startswith("--")]
    assert len(listed) >= 20, f"the listing was not read: {listed}"
    return listed


def documented_rows() -> dict[str, str]:
    """configuration.md's flags table: flag (``REPOSITORY`` for the positional) to its variable."""
    rows = (ROW.match(line) for line in CONFIGURATION.read_text().splitlines())
    return {row.group("flag"): row.group("variable") for row in rows if row}


def test_every_flag_shows_its_variable_in_help(help_entries: dict[str, str], flags: list[str]) -> None:
    assert "CONCH_REPOSITORY" in help_entries["repository"]
    missing = [flag for flag in flags if variable_of(flag) not in VARIABLE.findall(help_entries[flag])]
    assert not missing, f"conch serve --help does not show these flags' CONCH_* variables: {missing}"


def test_every_flag_and_its_variable_have_a_row_in_configuration_md(flags: list[str]) -> None:
    rows = documented_rows()

    assert rows.get("REPOSITORY") == "CONCH_REPOSITORY"
    missing = [flag for flag in flags if flag not in rows]
    assert not missing, f"docs/configuration.md's flags table has no row for {missing}"
    wrong = {flag: rows[flag] for flag in flags if rows[flag] != variable_of(flag)}
    assert not wrong, f"docs/configuration.md names the wrong variable for {wrong}"


def test_every_flag_is_set_by_a_test(flags: list[str]) -> None:
    tests = sorted(path for path in (ROOT / "tests").rglob("test_*.py") if path.name != "test_claims.py")
    sources = "\n".join(path.read_text() for path in tests)

    def is_set(flag: str) -> bool:
        by_flag = re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", sources)
        return bool(by_flag or re.search(rf"\b{variable_of(flag)}\b", sources))

    untested = [flag for flag in flags if not is_set(flag)]
    assert not untested, f"no test under tests/ sets these flags or their variables: {untested}"


def test_every_variable_the_docs_name_is_one_conch_reads(help_entries: dict[str, str]) -> None:
    read = set(VARIABLE.findall(" ".join(help_entries.values())))
    read |= {v for path in (ROOT / "conch").rglob("*.py") for v in LITERAL.findall(path.read_text())}
    guides = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

    named = {(path.name, v) for path in guides for v in VARIABLE.findall(path.read_text())}

    assert ("configuration.md", "CONCH_HTTP_PORT") in named, "the guides were not read"
    unknown = sorted(f"{v} ({guide})" for guide, v in named if v not in read)
    assert not unknown, f"the docs name CONCH_* variables conch does not read: {unknown}"
