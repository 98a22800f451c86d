"""observability/recent_traffic.py with a fake clock: rates, percentiles and error rates over a window."""

from __future__ import annotations

import pytest

from conch.observability.recent_traffic import RecentTraffic, quantile, snapshot
from conch.observability.statistics import LATENCY_BUCKETS_S, ModelStatistics


def answered(stats: ModelStatistics, count: int, seconds: float) -> None:
    for _ in range(count):
        stats.record_success(int(seconds * 1e9), 0)


def test_figures_cover_only_the_window_not_the_totals() -> None:
    stats = ModelStatistics("scored", "1")
    answered(stats, 1000, 0.002)  # long ago: outside the window
    traffic = RecentTraffic(window_s=60)
    traffic.record(0.0, snapshot([stats]))
    answered(stats, 20, 0.002)  # before the window too
    traffic.record(30.0, snapshot([stats]))
    answered(stats, 50, 0.002)
    traffic.record(70.0, snapshot([stats]))
    traffic.record(95.0, snapshot([stats]))  # the window starts at 35: the snapshot at 30 is the baseline
    answered(stats, 40, 0.020)
    stats.record_failure(1_000_000, "REJECTED")
    stats.record_failure(1_000_000, "REJECTED")

    figures = traffic.figures(100.0, snapshot([stats]))["scored"]

    assert (figures.requests, figures.failed, figures.seconds) == (92, 2, 70.0)
    assert figures.rate == pytest.approx(92 / 70)
    assert figures.error_rate == pytest.approx(2 / 92)
    assert figures.p50_ms is not None and 1.0 < figures.p50_ms <= 2.5  # the 2 ms answers' bucket
    assert figures.p95_ms is not None and 10.0 < figures.p95_ms <= 25.0  # the 20 ms answers' bucket


def test_versions_add_up_and_a_version_loaded_inside_the_window_counts_whole() -> None:
    one, two = ModelStatistics("scored", "1"), ModelStatistics("scored", "2")
    answered(one, 10, 0.001)
    traffic = RecentTraffic(window_s=300)
    traffic.record(0.0, snapshot([one]))
    answered(one, 5, 0.001)
    answered(two, 7, 0.001)  # version 2 loaded after the snapshot

    figures = traffic.figures(10.0, snapshot([one, two]))

    assert figures["scored"].requests == 12


def test_a_reloaded_version_with_fresh_counters_is_not_negative() -> None:
    before = ModelStatistics("scored", "1")
    answered(before, 100, 0.001)
    traffic = RecentTraffic()
    traffic.record(0.0, snapshot([before]))
    after = ModelStatistics("scored", "1")  # the same version's new statistics after a reload
    answered(after, 3, 0.001)

    assert traffic.figures(5.0, snapshot([after]))["scored"].requests == 3


def test_no_snapshot_yet_and_no_traffic() -> None:
    stats = ModelStatistics("idle", "1")
    assert RecentTraffic().figures(1.0, snapshot([stats])) == {}
    traffic = RecentTraffic()
    traffic.record(0.0, snapshot([stats]))
    idle = traffic.figures(10.0, snapshot([stats]))["idle"]
    assert (idle.rate, idle.error_rate, idle.p50_ms, idle.p95_ms) == (0.0, 0.0, None, None)
    assert idle.to_json()["p95_ms"] is None


def test_quantile_interpolates_inside_a_bucket_as_histogram_quantile_does() -> None:
    buckets = [0] * (len(LATENCY_BUCKETS_S) + 1)
    buckets[LATENCY_BUCKETS_S.index(0.001)] = 10  # all ten in (0.5 ms, 1 ms]
    assert quantile(0.5, tuple(buckets)) == pytest.approx(0.00075)
    beyond = [0] * len(buckets)
    beyond[-1] = 4  # all above the last bound: only "more than 10 s" is known
    assert quantile(0.95, tuple(beyond)) == LATENCY_BUCKETS_S[-1]
    assert quantile(0.5, tuple([0] * len(buckets))) is None
