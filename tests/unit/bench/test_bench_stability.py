"""bench.stability reads every perf_analyzer window and judges a run by perf_analyzer's own verdict."""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bench import stability
from bench.cost_per_second import Second
from bench.servers import Ports, ServerProcess
from bench.stability import Run, parse_args, parse_passes, render, summary_rows

VERBOSE = """\
Request concurrency: 4
  Pass [1] throughput: 1040.5 infer/sec. Avg latency: 3810 usec (std 823 usec).
  Pass [2] throughput: 1750.0 infer/sec. Avg latency: 2281 usec (std 488 usec).
  Pass [3] throughput: 1400 infer/sec. Avg latency: 2853 usec (std 1465 usec).
Failed to obtain stable measurement within 10 measurement windows for concurrency 4.
"""


def test_every_window_is_read() -> None:
    rates, latencies = parse_passes(VERBOSE)
    assert rates == [1040.5, 1750.0, 1400.0]
    assert latencies == [3810.0, 2281.0, 2853.0]


def test_the_coefficient_of_variation_of_the_windows() -> None:
    run = Run("conch", "grpc", 4, stable=False, windows=[900.0, 1100.0])
    assert run.cv == pytest.approx(0.1)
    assert Run("conch", "grpc", 4, stable=True, windows=[1000.0]).cv is None


def test_the_summary_counts_stable_runs_and_quotes_the_worst_cv() -> None:
    # The unstable run's slow seconds (rate 800) cost the server and the client 1.25x the fast ones.
    seconds = [Second(rate, 100_000 / rate, 50_000 / rate) for rate in (800, 800, 1000, 1000, 1000, 1000)]
    runs = [
        Run("conch", "grpc", 4, True, [1000.0, 1000.0, 1000.0]),
        Run(
            "conch",
            "grpc",
            4,
            False,
            [800.0, 1200.0],
            failure="Failed to obtain stable measurement",
            seconds=seconds,
        ),
        Run("triton", "grpc", 4, True, [990.0, 1010.0]),
    ]
    lines = summary_rows(runs)
    assert lines[0] == "| grpc | 4 | conch | 1 of 2 | 10.0% | 20.0% | 800-1,200 | 0.80x | 1.25x | 1.25x | - |"
    assert lines[1] == "| grpc | 4 | triton | 1 of 1 | 1.0% | 1.0% | 990-1,010 | - | - | - | - |"
    args = argparse.Namespace(
        servers=["conch", "triton"], window_ms=None, model="tiny", runs=2, conch_args="", variant_args=None
    )

    text = render(runs, args, datetime(2026, 12, 1, tzinfo=UTC), ["machine"])
    assert "conch 1 of 2 stable, triton 1 of 1 stable" in text
    assert "conch grpc c=4: Failed to obtain stable measurement" in text
    assert "slow against fast seconds: rate 0.80x, server CPU/request 1.25x, client 1.25x" in text


def test_arguments() -> None:
    args = parse_args([])
    assert (args.runs, args.concurrencies, args.protocols) == (10, [1, 4, 8, 32], ["grpc", "http"])
    with pytest.raises(SystemExit):
        parse_args(["--runs", "0"])
    with pytest.raises(SystemExit):
        parse_args(["--servers", "mlserver"])


def test_a_variant_takes_its_turn_as_a_third_server_and_the_report_names_its_flags() -> None:
    args = parse_args(["--servers", "conch", "--variant-args", "--busy-poll-us 0"])
    assert args.servers == ["conch", "conch-variant"]
    assert parse_args([]).variant_args is None and "conch-variant" not in parse_args([]).servers
    runs = [
        Run("conch", "http", 1, True, [1000.0, 1000.0]),
        Run("conch-variant", "http", 1, False, [500.0, 1500.0], failure="Failed to obtain"),
    ]
    text = render(runs, args, datetime(2026, 12, 3, tzinfo=UTC), ["machine"])
    assert "conch 1 of 1 stable, conch-variant 0 of 1 stable" in text
    assert "conch-variant flags: `--busy-poll-us 0`" in text


def test_steal_is_the_eighth_counters_share_of_the_time_between_readings() -> None:
    from bench.stability import steal_share, unstable_line

    before = [100, 0, 50, 800, 0, 0, 10, 40, 0, 0]
    after = [400, 0, 150, 1300, 0, 0, 10, 140, 0, 0]  # 1,000 ticks, 100 of them stolen
    assert steal_share(before, after) == 0.1
    assert steal_share([], after) is None and steal_share(before, before) is None
    run = Run(
        "conch", "http", 1, False, [3000.0, 2100.0], failure="Failed to obtain stable measurement", steal=0.1
    )
    assert unstable_line(run) == (
        "- conch http c=1: Failed to obtain stable measurement (windows/s: 3,000, 2,100; steal 10.0%)"
    )


def test_the_core_speed_probe_times_its_loop_in_cpu_time() -> None:
    from bench.core_speed import probe_ns, spread

    assert probe_ns(20_000) > probe_ns(10) > 0  # more work, more CPU time
    assert spread([100_000] * 9 + [200_000]).startswith("p10 100 µs, p50 100 µs")


def test_a_perf_analyzer_that_never_finishes_is_killed_and_counted_unstable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hung = tmp_path / "perf_analyzer"
    hung.write_text("#!/bin/sh\nexec sleep 60\n")
    hung.chmod(0o755)
    monkeypatch.setattr(stability, "PERF_ANALYZER", hung)
    monkeypatch.setattr(stability, "RUN_TIMEOUT_S", 1)
    # No server listens: every sample fails, and the run still ends at the timeout.
    server = ServerProcess("conch", [], Ports(), tmp_path / "conch.log")

    started = time.monotonic()
    run = stability.run_once("conch", server, "http", 4, "tiny", [])

    assert time.monotonic() - started < 15
    assert (run.stable, run.failure, run.seconds) == (False, "perf_analyzer did not finish in 1 s", [])
