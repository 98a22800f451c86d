"""Semantic Versioning 2.0.0 (https://semver.org): the version a package is released under.

A package's MAJOR is a promise to callers: ``conch install`` refuses a package that changes the served
interface unless its MAJOR is higher than the served one's. So a version must follow the spec exactly
(``1.0``, ``v1.0.0`` and ``01.0.0`` are refused); a lenient parse would make that promise meaningless.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The grammar of semver.org, written with [0-9] because Python's \d also matches non-ASCII digits.
_NUMBER = r"0|[1-9][0-9]*"
_PRERELEASE_ID = rf"{_NUMBER}|[0-9]*[A-Za-z-][0-9A-Za-z-]*"
_SEMVER = re.compile(
    rf"(?P<major>{_NUMBER})\.(?P<minor>{_NUMBER})\.(?P<patch>{_NUMBER})"
    rf"(?:-(?P<prerelease>(?:{_PRERELEASE_ID})(?:\.(?:{_PRERELEASE_ID}))*))?"
    r"(?:\+(?P<build>[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?"
)


class SemVerError(ValueError):
    """A version string that is not SemVer 2.0.0; the message shows the expected form."""


@dataclass(frozen=True)
class SemVer:
    """A parsed version; ``prerelease`` and ``build`` are empty when absent."""

    major: int
    minor: int
    patch: int
    prerelease: str = ""
    build: str = ""

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.prerelease:
            text += f"-{self.prerelease}"
        if self.build:
            text += f"+{self.build}"
        return text


def parse_semver(text: str) -> SemVer:
    """``text`` as SemVer, or a :class:`SemVerError` saying what a valid version looks like."""
    match = _SEMVER.fullmatch(text)
    if match is None:
        raise SemVerError(
            f"'{text}' is not a SemVer 2.0.0 version: write MAJOR.MINOR.PATCH without a 'v' or leading "
            "zeros, e.g. 1.0.0, 2.1.0-rc.1 or 1.4.2+build.7"
        )
    return SemVer(
        major=int(match["major"]),
        minor=int(match["minor"]),
        patch=int(match["patch"]),
        prerelease=match["prerelease"] or "",
        build=match["build"] or "",
    )
