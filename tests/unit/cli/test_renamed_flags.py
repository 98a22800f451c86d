"""A renamed ``conch serve`` flag keeps its old name and variable for one release, with a warning."""

from __future__ import annotations

import pytest

from conch.cli.main import build_parser
from conch.cli.serve_flags import renamed_warnings


def test_the_old_flag_sets_the_new_one_and_is_warned_about(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["serve", "--frontends", "2"]
    args = build_parser().parse_args(argv)
    assert args.proxies == 2
    assert renamed_warnings(argv, {}) == [
        "conch: warning: --frontends is renamed --proxies (CONCH_PROXIES); the old name goes in the next "
        "release"
    ]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--help"])
    shown = capsys.readouterr().out
    assert "\n  --proxies" in shown and "\n  --frontends" not in shown  # no entry of its own
    assert "formerly --frontends (CONCH_FRONTENDS)" in " ".join(shown.split())


def test_the_new_flag_wins_and_says_nothing() -> None:
    argv = ["serve", "--proxies=0"]
    assert build_parser().parse_args(argv).proxies == 0
    assert renamed_warnings(argv, {}) == []


def test_the_old_variable_is_read_when_the_new_one_is_not_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONCH_FRONTENDS", "3")
    assert build_parser().parse_args(["serve"]).proxies == 3
    assert renamed_warnings(["serve"], {"CONCH_FRONTENDS": "3"})[0].startswith(
        "conch: warning: CONCH_FRONTENDS is renamed --proxies (CONCH_PROXIES)"
    )
    monkeypatch.setenv("CONCH_PROXIES", "auto")
    assert build_parser().parse_args(["serve"]).proxies is None
