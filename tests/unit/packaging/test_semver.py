"""SemVer 2.0.0 exactly as semver.org writes it: what is refused and what round-trips."""

from __future__ import annotations

import pytest

from conch.packaging.semver import SemVer, SemVerError, parse_semver


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0.0.0", SemVer(0, 0, 0)),
        ("1.2.3", SemVer(1, 2, 3)),
        ("10.20.30", SemVer(10, 20, 30)),
        ("1.0.0-alpha", SemVer(1, 0, 0, prerelease="alpha")),
        ("1.0.0-rc.1", SemVer(1, 0, 0, prerelease="rc.1")),
        ("1.0.0-0.3.7", SemVer(1, 0, 0, prerelease="0.3.7")),
        ("1.0.0-x-y-z.--", SemVer(1, 0, 0, prerelease="x-y-z.--")),
        ("1.0.0-alpha+001", SemVer(1, 0, 0, prerelease="alpha", build="001")),
        ("1.0.0+20130313144700", SemVer(1, 0, 0, build="20130313144700")),
        ("2.1.0-beta+exp.sha.5114f85", SemVer(2, 1, 0, prerelease="beta", build="exp.sha.5114f85")),
    ],
)
def test_valid_versions_parse_and_print_back(text: str, expected: SemVer) -> None:
    assert parse_semver(text) == expected
    assert str(parse_semver(text)) == text


@pytest.mark.parametrize(
    "text",
    [
        "1.0",
        "1",
        "v1.0.0",
        "01.0.0",
        "1.01.0",
        "1.0.01",
        "1.0.0-01",
        "1.0.0-",
        "1.0.0+",
        "1.0.0-alpha..1",
        "1.0.0+build+again",
        "1.0.0 ",
        "1.0.0\n",
        "-1.0.0",
        "1.0.0.0",
        "1.٣.0",
        "",
    ],
)
def test_non_semver_is_refused_with_the_expected_form(text: str) -> None:
    with pytest.raises(SemVerError, match=r"not a SemVer 2\.0\.0 version.*e\.g\. 1\.0\.0"):
        parse_semver(text)
