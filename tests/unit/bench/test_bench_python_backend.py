"""The python-backend benchmark's own arithmetic: which Triton model each conch model is set against,
per-round ratios of throughput and of p50 (conch's ONNX-served models against Triton's python ones),
the worst round quoted beside the median, and the verdict against issue 14's target."""

from __future__ import annotations

from bench.loadgen import LoadResult
from bench.python_backend import parse_args
from bench.python_backend_report import Pairing, ratio_cell, target_table, triton_model, verdict
from bench.report import BenchResults, Point, Row, round_ratios


def row(peer: str, points: dict[tuple[str, int], dict[int, tuple[float, float] | None]]) -> Row:
    """A gRPC row; each cell's rounds as (throughput, p50 ms), None for a failed round."""
    measured = Row(peer, peer, "grpc")
    for key, rounds in points.items():
        for number, figures in rounds.items():
            load = LoadResult.failed("x") if figures is None else LoadResult(figures[0], figures[1], 9.0)
            measured.add(key, Point(load), number)
    return measured


def test_conch_models_are_set_against_the_triton_model_they_stand_for() -> None:
    assert triton_model("tiny_python") == "tiny_python"
    assert triton_model("tiny_bls") == "tiny_bls"
    assert triton_model("tiny_onnx") == "tiny_python"
    assert triton_model("tiny_bls_onnx") == "tiny_bls"


def test_ratios_pair_rounds_across_models_and_for_p50() -> None:
    conch = row("conch", {("tiny_bls_onnx", 1): {1: (300.0, 2.0), 2: (330.0, 3.0), 3: (200.0, 1.0)}})
    triton = row("triton", {("tiny_bls", 1): {1: (200.0, 4.0), 2: (300.0, 2.0), 3: None}})
    key, peer_key = ("tiny_bls_onnx", 1), ("tiny_bls", 1)

    assert round_ratios(conch, triton, key, peer_key) == {1: 1.5, 2: 1.1}
    assert round_ratios(conch, triton, key, peer_key, "p50_ms") == {1: 0.5, 2: 1.5}


def test_a_cell_quotes_the_median_the_worst_round_and_every_round() -> None:
    conch = row("conch", {("m", 32): {1: (1200.0, 1.0), 2: (900.0, 1.0), 3: (1500.0, 1.0)}})
    conch.add(("m", 1), Point(LoadResult(100.0, 1.1, 2.0)), 1)
    conch.add(("m", 1), Point(LoadResult(100.0, 0.8, 2.0)), 2)
    triton = row("triton", {("m", 32): {n: (1000.0, 1.0) for n in (1, 2, 3)}})
    triton.add(("m", 1), Point(LoadResult(100.0, 1.0, 2.0)), 1)
    triton.add(("m", 1), Point(LoadResult(100.0, 1.0, 2.0)), 2)
    pairing = Pairing("m", "m", "grpc", conch, triton)

    assert ratio_cell(pairing, 32, "throughput") == "1.20x, worst 0.90x (1.20, 0.90, 1.50)"
    # Lower p50 is better: the worst round is the highest ratio.
    assert ratio_cell(pairing, 1, "p50_ms") == "0.95x, worst 1.10x (1.10, 0.80)"
    assert verdict(pairing, 32, "throughput", 1.0) == "median only (worst 0.90x)"
    assert verdict(pairing, 32, "throughput", 1.5) == "no (1.20x)"
    assert verdict(pairing, 1, "p50_ms", 1.2) == "yes, every round"


def test_the_target_table_has_a_line_per_conch_model_and_protocol() -> None:
    conch = row("conch", {("m_onnx", 32): {1: (2000.0, 1.0)}, ("m_onnx", 1): {1: (500.0, 0.5)}})
    triton = row("triton", {("m_python", 32): {1: (1000.0, 1.0)}, ("m_python", 1): {1: (400.0, 1.0)}})
    results = BenchResults("now", [], [], ["m_onnx"], rows=[conch, triton])

    line = next(line for line in target_table(results, ["conch", "triton"]).splitlines() if "m_onnx" in line)

    assert [cell.strip() for cell in line.split("|")[1:-1]] == [
        "m_onnx",
        "gRPC, perf_analyzer",
        "yes, every round",
        "yes, every round",
        "yes, every round",
    ]


def test_quick_is_one_round_of_short_points_on_tiny() -> None:
    args = parse_args(["--quick"])

    assert (args.rounds, args.seconds, args.models) == (1, 2.0, ["tiny"])
    assert parse_args([]).rounds == 3
