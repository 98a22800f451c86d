"""Version folders and Triton's ``version_policy``: latest, all, specific."""

from __future__ import annotations

from pathlib import Path

import pytest
from tritonclient.grpc import model_config_pb2 as mc

from conch.repository.config import parse_config
from conch.repository.version_policy import select_versions, version_folders


def policy(text: str) -> mc.ModelVersionPolicy:
    return parse_config(text).version_policy


def test_version_folders_are_positive_numbers_without_leading_zero(tmp_path: Path) -> None:
    for name in ["1", "2", "10", "0", "01", "abc", "3a", ".4"]:
        (tmp_path / name).mkdir()
    (tmp_path / "5").write_text("a file, not a version")

    assert version_folders(tmp_path) == [1, 2, 10]


def test_version_folders_of_an_empty_model(tmp_path: Path) -> None:
    assert version_folders(tmp_path) == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", [10]),
        ("version_policy { latest { } }", [10]),
        ("version_policy { latest { num_versions: 2 } }", [3, 10]),
        ("version_policy { latest { num_versions: 9 } }", [1, 2, 3, 10]),
        ("version_policy { all { } }", [1, 2, 3, 10]),
        ("version_policy { specific { versions: [ 3, 1, 7 ] } }", [1, 3]),
        ("version_policy { specific { } }", []),
    ],
    ids=[
        "default",
        "latest-default",
        "latest-2",
        "latest-more-than-exist",
        "all",
        "specific",
        "specific-none",
    ],
)
def test_select_versions(text: str, expected: list[int]) -> None:
    assert select_versions(policy(text), [2, 10, 1, 3]) == expected


def test_select_versions_with_no_folders() -> None:
    assert select_versions(policy(""), []) == []
    assert select_versions(policy("version_policy { all { } }"), []) == []
