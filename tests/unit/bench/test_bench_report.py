"""The benchmark's rounds: each cell is the median round, and the spread is shown beside it; each
conch/peer ratio is the median of the ratios within a round, with their spread."""

from __future__ import annotations

from bench.loadgen import LoadResult
from bench.report import (
    BenchResults,
    PairedRatio,
    Point,
    Row,
    _cell,
    overhead_table,
    paired_ratio,
    ratio_table,
)
from bench.run import parse_args, round_order


def measured(peer: str, protocol: str, rates: dict[int, float | None]) -> Row:
    """A row with one mlp c=32 point per round number; None: the point failed that round."""
    row = Row(peer, peer, protocol)
    for round_number, rate in rates.items():
        load = LoadResult.failed("did not finish") if rate is None else LoadResult(rate, 1.0, 2.0)
        row.add(("mlp", 32), Point(load), round_number)
    return row


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


def test_a_ratio_is_the_median_of_the_per_round_ratios_not_a_ratio_of_medians() -> None:
    # Rounds recorded in the order an alternating run measures them; the round number pairs them.
    conch = measured("conch", "grpc", {1: 1000.0, 3: 1500.0, 2: 2000.0})
    triton = measured("triton", "grpc", {2: 1000.0, 1: 1000.0, 3: 2000.0})

    ratio = paired_ratio(conch, triton, ("mlp", 32))

    # Per round: 1.0, 2.0, 0.75. The medians' ratio would be 1500 / 1000 = 1.5.
    assert ratio == PairedRatio(median=1.0, low=0.75, high=2.0, rounds=3)


def test_a_round_where_either_side_failed_is_left_out_of_the_ratio() -> None:
    conch = measured("conch", "grpc", {1: 1200.0, 2: 900.0, 3: None})
    triton = measured("triton", "grpc", {1: 1000.0, 2: None, 3: 1000.0})

    assert paired_ratio(conch, triton, ("mlp", 32)) == PairedRatio(1.2, 1.2, 1.2, 1)
    assert paired_ratio(conch, measured("triton", "grpc", {1: None}), ("mlp", 32)) is None


def test_the_ratio_table_shows_the_median_ratio_and_its_spread() -> None:
    conch = measured("conch", "grpc", {1: 1000.0, 2: 2000.0, 3: 1500.0})
    triton = measured("triton", "grpc", {1: 1000.0, 2: 1000.0, 3: 2000.0})
    once = measured("conch", "http", {1: 1500.0})
    triton_http = measured("triton", "http", {1: 1000.0})
    results = BenchResults("now", [], [], ["mlp"], rows=[conch, once, triton, triton_http])

    lines = ratio_table(results).splitlines()
    cells = {
        line.split("|")[1].strip(): line.split("|")[3].strip() for line in lines if line.startswith("| conch")
    }

    assert cells["conch / triton, gRPC, perf_analyzer"] == "1.00x [0.75-2.00]"
    assert cells["conch / triton, HTTP JSON, wrk"] == "1.50x", "one round: no spread to show"


def test_rounds_alternate_the_order_of_the_servers() -> None:
    servers = ["conch", "conch-2w", "triton"]

    assert [round_order(servers, n) for n in (1, 2, 3)] == [servers, servers[::-1], servers]


def test_three_rounds_by_default_and_one_with_quick() -> None:
    assert parse_args([]).rounds == 3
    assert parse_args(["--quick"]).rounds == 1
    assert parse_args(["--quick", "--rounds", "2"]).rounds == 2
    assert parse_args(["--quick"]).seconds == 2.0
