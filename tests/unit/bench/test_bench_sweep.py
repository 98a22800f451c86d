"""The model-size sweep's report: every ratio pairs the two servers round by round, the targets are
judged on the worst size, and the charts and raw data are written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.loadgen import LoadResult
from bench.models import MODELS, SWEEP_MODELS, mlp_model, multiply_adds
from bench.report import BenchResults, Point, Row
from bench.sweep import QUICK_SIZES, parse_args
from bench.sweep_report import ratio, render, target_table, worst, write_charts, write_data


def results_of(points: dict[tuple[str, str, str, int], list[tuple[float, float]]]) -> BenchResults:
    """(server, protocol, size, clients) -> [(throughput, p50) per round]."""
    results = BenchResults("now", ["machine"], ["method"], models=["tiny", "s128", "huge"])
    rows: dict[tuple[str, str], Row] = {}
    for (server, protocol, size, clients), rounds in points.items():
        row = rows.setdefault((server, protocol), Row(server, server, protocol))
        for number, (rate, p50) in enumerate(rounds, start=1):
            row.add((size, clients), Point(LoadResult(rate, p50, p50 * 2)), number)
    results.rows = list(rows.values())
    return results


def test_the_family_spans_overhead_bound_to_compute_bound_with_different_widths() -> None:
    sizes = list(SWEEP_MODELS)
    assert SWEEP_MODELS[sizes[0]] == (16, 64, 4)
    assert SWEEP_MODELS[sizes[-1]] == (1024, 4096, 4096, 1000)
    assert len(sizes) >= 8
    adds = [multiply_adds(size) for size in sizes]
    assert adds == sorted(adds) and len(set(adds)) == len(adds)
    assert len({widths[0] for widths in SWEEP_MODELS.values()}) == len(sizes)
    assert all(size in MODELS for size in sizes)
    graph = mlp_model(SWEEP_MODELS["s256"]).graph
    assert [node.op_type for node in graph.node].count("Gemm") == 3


def test_ratios_pair_rounds_and_the_worst_size_decides_the_target() -> None:
    results = results_of(
        {
            ("conch", "grpc", "tiny", 32): [(900.0, 1.0), (800.0, 1.0), (1000.0, 1.0)],
            ("triton", "grpc", "tiny", 32): [(1000.0, 1.0), (1000.0, 1.0), (1000.0, 1.0)],
            ("conch", "grpc", "huge", 32): [(2000.0, 1.0), (2000.0, 1.0), (2000.0, 1.0)],
            ("triton", "grpc", "huge", 32): [(1000.0, 1.0), (1000.0, 1.0), (1000.0, 1.0)],
        }
    )
    tiny = ratio(results, "grpc", ("tiny", 32), "throughput")
    assert tiny is not None
    assert (tiny.median, tiny.low, tiny.high, tiny.rounds) == (0.9, 0.8, 1.0, 3)
    found = worst(results, "grpc", 32, "throughput")
    assert found is not None and found[0] == "tiny"
    table = target_table(results, [32])
    assert "| grpc throughput c=32 >= 0.8x (goal 1.0x) | tiny | 0.90x [0.80-1.00] | yes |" in table


def test_latency_targets_read_the_highest_ratio_and_fail_above_one() -> None:
    results = results_of(
        {
            ("conch", "http_json", "tiny", 1): [(1.0, 0.5)],
            ("triton", "http_json", "tiny", 1): [(1.0, 1.0)],
            ("conch", "http_json", "huge", 1): [(1.0, 3.0)],
            ("triton", "http_json", "huge", 1): [(1.0, 2.0)],
        }
    )
    table = target_table(results, [1])
    assert "| http_json p50 c=1 <= 1.0x of Triton's | huge | 1.50x | no |" in table


def test_a_failed_server_leaves_its_cells_missing_not_zero(tmp_path: Path) -> None:
    results = results_of(
        {("conch", "grpc", "tiny", 32): [(900.0, 1.0)], ("triton", "grpc", "tiny", 32): [(1.0, 1.0)]}
    )
    results.row("triton", "grpc").note = "not installable"  # type: ignore[union-attr]
    assert ratio(results, "grpc", ("tiny", 32), "throughput") is None
    assert "not installable" in render(results, [32], [])


def test_charts_and_data_are_written(tmp_path: Path) -> None:
    results = results_of(
        {
            (server, protocol, size, clients): [(rate * clients, 1.0 + clients / 10)]
            for server, rate in (("conch", 900.0), ("triton", 1000.0))
            for protocol in ("http_json", "http_binary", "grpc")
            for size in ("tiny", "s128", "huge")
            for clients in (1, 8, 32)
        }
    )
    charts = write_charts(results, [1, 8, 32], tmp_path / "run")
    assert [chart.name for chart in charts] == ["run-ratio.png", "run-latency.png"]
    for chart in charts:
        assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and chart.stat().st_size > 10_000
    write_data(results, tmp_path / "run.json")
    data = json.loads((tmp_path / "run.json").read_text())
    conch_grpc = next(row for row in data["rows"] if row["server"] == "conch" and row["protocol"] == "grpc")
    assert {(p["size"], p["clients"]) for p in conch_grpc["points"]} == {
        (s, c) for s in ("tiny", "s128", "huge") for c in (1, 8, 32)
    }
    text = render(results, [1, 8, 32], [chart.name for chart in charts])
    assert "![run-ratio.png](run-ratio.png)" in text and "0.90x" in text


def test_arguments() -> None:
    assert parse_args(["--quick"]).sizes == list(QUICK_SIZES)
    assert parse_args([]).sizes == list(SWEEP_MODELS)
    assert parse_args(["--sizes", "huge,tiny", "--concurrencies", "32,1"]).sizes == ["tiny", "huge"]
    assert parse_args(["--concurrencies", "32,1"]).concurrencies == [1, 32]
    with pytest.raises(SystemExit):
        parse_args(["--sizes", "enormous"])
    with pytest.raises(SystemExit):
        parse_args(["--concurrencies", "0"])


def test_points_are_interleaved_unless_asked_otherwise_and_the_report_says_which() -> None:
    from bench.sweep import describe_method

    assert parse_args([]).interleave is True
    assert parse_args(["--sequential"]).interleave is False
    assert "at once on the other" in describe_method(5.0, 2, interleave=True)[0]
    assert "one after the other" in describe_method(5.0, 2, interleave=False)[0]
