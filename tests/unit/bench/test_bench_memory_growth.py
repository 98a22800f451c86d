"""bench.memory_growth judges growth from the first sample after warm-up, to the last and the highest."""

from __future__ import annotations

import os

import pytest

from bench.memory_growth import growth, parse_args, tree_rss_mib


def test_growth_is_measured_after_warm_up() -> None:
    samples = [(0, 50.0), (1000, 90.0), (2000, 100.0), (3000, 104.0), (4000, 101.0)]
    found = growth(samples, warmup=2000)
    assert (found.warm_mib, found.last_mib, found.peak_mib) == (100.0, 101.0, 104.0)
    assert found.growth_mb == pytest.approx(1.048576)
    assert found.peak_growth_mb == pytest.approx(4 * 1.048576)
    with pytest.raises(ValueError, match="no sample after"):
        growth(samples, warmup=5000)


def test_the_resident_set_of_a_live_process() -> None:
    assert 5.0 < tree_rss_mib(os.getpid()) < 20_000.0


def test_arguments() -> None:
    assert parse_args([]).requests == 100_000
    with pytest.raises(SystemExit):
        parse_args(["--warmup", "200000"])
