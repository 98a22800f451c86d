"""``--proxies auto`` (``conch.runtime.proxy_count``): one frontend per usable core from 8
cores, none below, and none where frontends would only relay."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from conch.cli.arguments import count_or_auto
from conch.gateway.gateway import GatewaySettings
from conch.observability.inference_log import RequestLogSettings
from conch.runtime.proxy_count import auto_proxies, proxy_count
from conch.runtime.settings import ServeSettings


def auto(**changes: object) -> ServeSettings:
    return ServeSettings(repository=Path("repo"), proxies=None, **changes)  # type: ignore[arg-type]


def test_auto_starts_one_frontend_per_core_from_eight_cores_and_at_most_sixteen() -> None:
    assert [auto_proxies(n) for n in (1, 2, 4, 7)] == [0, 0, 0, 0]
    assert [auto_proxies(n) for n in (8, 12, 16, 64)] == [8, 12, 16, 16]


def test_auto_counts_the_usable_cores_and_says_why() -> None:
    count, why = proxy_count(auto(), {}, cores=lambda: 32)
    assert count == 16 and "32 usable cores" in why
    count, why = proxy_count(auto(), {}, cores=lambda: 2)
    assert count == 0 and "2 usable cores" in why


def test_auto_starts_none_off_linux() -> None:
    count, why = proxy_count(auto(), {}, cores=lambda: 32, platform="darwin")
    assert count == 0 and "Linux only" in why
    assert proxy_count(auto(), {}, cores=lambda: 32, platform="linux")[0] == 16


def test_a_number_given_is_kept_whatever_the_cores() -> None:
    assert proxy_count(ServeSettings(repository=Path("r"), proxies=3), {}, cores=lambda: 1)[0] == 3
    assert proxy_count(ServeSettings(repository=Path("r"), proxies=0), {}, cores=lambda: 64)[0] == 0


@pytest.mark.parametrize(
    ("changes", "environ"),
    [
        ({"workers": 2}, {}),
        ({"gateway": GatewaySettings(max_in_flight=10)}, {}),
        ({"request_log": RequestLogSettings(inferences=True)}, {}),
        ({}, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}),
    ],
)
def test_auto_starts_none_where_frontends_would_only_relay(
    changes: dict[str, object], environ: dict[str, str]
) -> None:
    count, why = proxy_count(auto(**changes), environ, cores=lambda: 32)
    assert count == 0 and why.startswith("auto:")


def test_the_flag_takes_auto_or_a_whole_number() -> None:
    assert count_or_auto("auto") is None and count_or_auto("AUTO") is None
    assert count_or_auto("0") == 0 and count_or_auto("4") == 4
    for bad in ("-1", "two", ""):
        with pytest.raises(argparse.ArgumentTypeError, match=r"\(or auto\)"):
            count_or_auto(bad)
