"""bench.scaling's plan and its ratios to one core and one process."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

from bench.scaling import Setup, pinning_check, render, setups


def test_each_core_count_runs_with_one_process_with_one_per_core_and_with_proxies() -> None:
    assert setups([1, 2, 4]) == [
        Setup(1, 1),
        *(Setup(2, 1), Setup(2, 2), Setup(2, 1, 1), Setup(2, 1, 2)),
        *(Setup(4, 1), Setup(4, 4), Setup(4, 1, 3), Setup(4, 1, 4)),
    ]
    assert Setup(2, 2).name == "2 cores, 2 workers" and Setup(1, 1).name == "1 core, 1 worker"
    assert Setup(2, 1, 1).name == "2 cores, 1 proxy" and Setup(4, 1, 3).name == "4 cores, 3 proxies"


def test_kinds_pick_the_setups_and_the_reference_is_always_one_process_on_the_fewest_cores() -> None:
    assert setups([1, 4, 16], ["workers", "proxies"]) == [
        Setup(1, 1),
        *(Setup(4, 4), Setup(4, 1, 4)),
        *(Setup(16, 16), Setup(16, 1, 16)),
    ]
    assert setups([2, 4], ["proxies-1"]) == [Setup(2, 1), Setup(4, 1, 3)]


def test_the_pinning_check_sees_taskset_confine_two_busy_processes_to_one_core() -> None:
    # This machine's taskset is real: two burners on one core take about twice as long as on two.
    verdict = pinning_check([0, 1])
    assert verdict.startswith("taskset holds"), verdict
    assert pinning_check([0]) == "taskset: not checked (one core)"


def test_ratios_are_medians_against_one_core() -> None:
    plan = setups([1, 2])
    rates = {(plan[0], "grpc"): [1000.0, 900.0, 1100.0], (plan[2], "grpc"): [1600.0, 1700.0, 1500.0]}
    args = argparse.Namespace(model="tiny", clients=32, rounds=3, wrk_threads=1)
    text = render(rates, plan, args, datetime(2026, 12, 1, tzinfo=UTC), [])
    assert "| 2 cores, 2 workers | - | - | 1,600/s [1,500-1,700], 1.60x |" in text
    assert "| 1 core, 1 worker | - | - | 1,000/s [900-1,100], 1.00x |" in text
    assert "wrk with 1 thread(s)" in text
