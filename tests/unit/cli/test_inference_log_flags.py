"""The request logging flags: their parsers, and the combinations ``conch serve`` refuses."""

from __future__ import annotations

import argparse

import pytest

from conch.cli.arguments import fraction
from conch.cli.log_flags import names, request_log_settings
from conch.cli.main import build_parser


def serve_args(*flags: str) -> argparse.Namespace:
    return build_parser().parse_args(["serve", *flags])


def test_the_sample_share_is_from_0_to_1_and_names_are_comma_separated() -> None:
    assert (fraction("0"), fraction("0.01"), fraction("1")) == (0.0, 0.01, 1.0)
    for bad in ("-0.1", "1.5", "often"):
        with pytest.raises(argparse.ArgumentTypeError):
            fraction(bad)
    assert names(" INPUT0, ,TEXT ") == ("INPUT0", "TEXT")


def test_the_defaults_log_no_inference_and_sample_nothing() -> None:
    settings = request_log_settings(serve_args())

    assert (settings.inferences, settings.sample_bodies, settings.redact, settings.access_log) == (
        False,
        0.0,
        (),
        False,
    )
    assert settings.audit_max_mb == 100


@pytest.mark.parametrize(
    ("flags", "fix"),
    [
        (("--log-sample-bodies", "0.1"), "--log-sample-bodies needs --audit-log"),
        (("--log-sample-bodies", "0.1", "--audit-log", "a.jsonl", "--workers", "2"), "without --workers"),
    ],
)
def test_combinations_that_cannot_work_are_refused_with_the_fix(flags: tuple[str, ...], fix: str) -> None:
    with pytest.raises(ValueError, match=fix):
        request_log_settings(serve_args(*flags))
