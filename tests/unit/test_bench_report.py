"""The benchmark's rounds: each cell is the median round, and the spread is shown beside it."""

from __future__ import annotations

from bench.loadgen import LoadResult
from bench.report import BenchResults, Point, Row, _cell, overhead_table


def test_the_cell_is_the_median_round_with_its_own_latencies() -> None:
    row = Row("conch", "conch", "grpc")
    for rate, p50 in [(900.0, 9.0), (1500.0, 5.0), (1200.0, 7.0)]:
        row.add(("mlp", 32), Point(LoadResult(rate, p50, p50 * 2)))

    assert row.throughput("mlp", 32) == 1200.0
    assert row.cells[("mlp", 32)].load.p50_ms == 7.0
    assert row.spread(("mlp", 32)) == (900.0, 1500.0)
    assert _cell(row, ("mlp", 32), "throughput") == "1,200 [900-1,500]"


def test_a_failed_round_ranks_last_and_is_not_in_the_spread() -> None:
    row = Row("conch", "conch", "grpc")
    row.add(("tiny", 1), Point(LoadResult(800.0, 1.0, 2.0)))
    row.add(("tiny", 1), Point(LoadResult.failed("perf_analyzer did not finish")))

    assert row.throughput("tiny", 1) == 800.0
    assert row.spread(("tiny", 1)) is None
    assert _cell(row, ("tiny", 1), "throughput") == "800"


def test_the_overhead_table_splits_p50_at_the_servers_own_request_time() -> None:
    row = Row("conch", "conch", "grpc")
    row.add(("mlp", 1), Point(LoadResult(700.0, 1.4, 2.0), compute_ms=0.8, request_ms=0.9))
    silent = Row("naive", "naive", "http")
    silent.add(("mlp", 1), Point(LoadResult(900.0, 1.1, 1.7)))
    results = BenchResults("now", [], [], ["mlp"], rows=[row, silent])

    table = overhead_table(results).splitlines()

    assert "server request ms" in table[0] and "outside the server's timing ms" in table[0]
    conch_cells = [cell.strip() for cell in table[2].split("|")[1:-1]]
    assert conch_cells[3:9] == ["1.400", "2.000", "0.800", "0.600", "0.900", "0.500"]
    naive_cells = [cell.strip() for cell in table[3].split("|")[1:-1]]
    assert naive_cells[5:9] == ["-", "-", "-", "-"], "a server without statistics leaves them empty"
