"""Comparing two versions' answers to one request: drift scores and agreement per datatype."""

from __future__ import annotations

import math

import numpy as np
import pytest

from conch.core.tolerances import TOLERANCES
from conch.release.compare import UNCOMPARABLE_DRIFT, agree, compare_outputs, drift_score


def test_equal_vectors_do_not_drift() -> None:
    a = np.array([[0.1, 0.7, 0.2]], dtype=np.float32)
    assert drift_score(a, a.copy()) == pytest.approx(0.0, abs=1e-12)


def test_drift_ignores_scale() -> None:
    a = np.array([0.1, 0.7, 0.2])
    assert drift_score(a, 3 * a) == pytest.approx(0.0, abs=1e-12)


def test_opposite_vectors_drift_two() -> None:
    a = np.array([1.0, -2.0, 0.5])
    assert drift_score(a, -a) == pytest.approx(2.0)


def test_orthogonal_vectors_drift_one() -> None:
    assert drift_score(np.array([1.0, 0.0]), np.array([0.0, 5.0])) == pytest.approx(1.0)


def test_known_angle() -> None:
    # 60 degrees apart: cosine 0.5.
    b = np.array([math.cos(math.pi / 3), math.sin(math.pi / 3)])
    assert drift_score(np.array([1.0, 0.0]), b) == pytest.approx(0.5)


def test_two_zero_vectors_do_not_drift() -> None:
    assert drift_score(np.zeros(4), np.zeros(4)) == 0.0


def test_one_zero_vector_drifts_one() -> None:
    assert drift_score(np.zeros(3), np.array([0.0, 0.2, 0.0])) == 1.0
    assert drift_score(np.array([0.3, 0.0, 0.0]), np.zeros(3)) == 1.0


def test_nan_drifts_as_uncomparable() -> None:
    a = np.array([0.5, 0.5])
    assert drift_score(a, np.array([np.nan, 0.5])) == UNCOMPARABLE_DRIFT == 1.0
    assert drift_score(np.array([np.inf, 0.0]), a) == 1.0


def test_different_sizes_drift_one() -> None:
    assert drift_score(np.ones(3), np.ones(4)) == 1.0


def test_large_float32_values_do_not_overflow() -> None:
    big = np.array([3e38, 3e38], dtype=np.float32)
    assert drift_score(big, big) == pytest.approx(0.0, abs=1e-12)


def test_drift_stays_in_range_despite_rounding() -> None:
    rng = np.random.default_rng(3)
    for _ in range(200):
        a = rng.normal(size=7)
        assert 0.0 <= drift_score(a, a * 1.0000001) <= 2.0
        assert 0.0 <= drift_score(a, -a) <= 2.0


def test_scores_agree_when_every_row_has_the_same_argmax() -> None:
    old = np.array([[0.1, 0.8, 0.1], [0.6, 0.3, 0.1]], dtype=np.float32)
    new = np.array([[0.2, 0.5, 0.3], [0.4, 0.35, 0.25]], dtype=np.float32)
    assert agree(old, new, "FP32")


def test_scores_disagree_when_one_row_changes_class() -> None:
    old = np.array([[0.1, 0.8, 0.1], [0.6, 0.3, 0.1]], dtype=np.float32)
    new = np.array([[0.1, 0.8, 0.1], [0.3, 0.6, 0.1]], dtype=np.float32)
    assert not agree(old, new, "FP32")


def test_float_with_last_dimension_one_uses_the_tolerance() -> None:
    rtol, atol = TOLERANCES[np.dtype(np.float64)]
    old = np.array([[100.0], [2.0]])
    within = old * (1 + rtol * 0.5)
    beyond = old * (1 + rtol * 2 + atol)
    assert agree(old, within, "FP64")
    assert not agree(old, beyond, "FP64")


def test_float32_tolerance_edge() -> None:
    rtol, atol = TOLERANCES[np.dtype(np.float32)]
    old = np.array([1.0], dtype=np.float32)
    assert agree(old, np.array([1.0 + 0.9 * (atol + rtol)], dtype=np.float32), "FP32")
    assert not agree(old, np.array([1.0 + 1.5 * (atol + rtol)], dtype=np.float32), "FP32")


def test_scalar_float_outputs_use_the_tolerance() -> None:
    assert agree(np.float32(0.5).reshape(()), np.float32(0.5).reshape(()), "FP32")
    assert not agree(np.float32(0.5).reshape(()), np.float32(0.6).reshape(()), "FP32")


def test_integers_must_be_equal() -> None:
    assert agree(np.array([1, 2, 3], dtype=np.int64), np.array([1, 2, 3], dtype=np.int64), "INT64")
    assert not agree(np.array([1, 2, 3], dtype=np.int64), np.array([1, 2, 4], dtype=np.int64), "INT64")


def test_integers_with_classes_are_not_argmaxed() -> None:
    # Same argmax per row, different values: integer outputs are compared exactly.
    old = np.array([[0, 5, 1]], dtype=np.int32)
    new = np.array([[0, 6, 1]], dtype=np.int32)
    assert not agree(old, new, "INT32")


def test_bool_must_be_equal() -> None:
    assert agree(np.array([True, False]), np.array([True, False]), "BOOL")
    assert not agree(np.array([True, False]), np.array([True, True]), "BOOL")


def test_bytes_must_be_equal() -> None:
    old = np.array([b"cat", b"dog"], dtype=np.object_)
    assert agree(old, np.array([b"cat", b"dog"], dtype=np.object_), "BYTES")
    assert not agree(old, np.array([b"cat", b"cow"], dtype=np.object_), "BYTES")


def test_shapes_must_match() -> None:
    assert not agree(np.zeros((2, 3)), np.zeros((3, 2)), "FP64")
    assert not agree(np.zeros(2, dtype=np.int64), np.zeros(3, dtype=np.int64), "INT64")


def test_request_agrees_when_all_compared_outputs_agree() -> None:
    baseline = {"probabilities": np.array([[0.2, 0.8]]), "label": np.array([1])}
    candidate = {"probabilities": np.array([[0.3, 0.7]]), "label": np.array([1])}
    types = {"probabilities": "FP64", "label": "INT64"}
    result = compare_outputs(baseline, candidate, types, None)
    assert result.agreed
    assert result.disagreeing == ()
    expected = drift_score(baseline["probabilities"], candidate["probabilities"])
    assert expected > 0
    assert result.drift == pytest.approx(expected)


def test_one_disagreeing_output_makes_the_request_disagree() -> None:
    baseline = {"probabilities": np.array([[0.2, 0.8]]), "label": np.array([1])}
    candidate = {"probabilities": np.array([[0.3, 0.7]]), "label": np.array([0])}
    types = {"probabilities": "FP64", "label": "INT64"}
    result = compare_outputs(baseline, candidate, types)
    assert not result.agreed
    assert result.disagreeing == ("label",)


def test_names_restrict_the_comparison() -> None:
    baseline = {"probabilities": np.array([[0.2, 0.8]]), "label": np.array([1])}
    candidate = {"probabilities": np.array([[0.3, 0.7]]), "label": np.array([0])}
    types = {"probabilities": "FP64", "label": "INT64"}
    assert compare_outputs(baseline, candidate, types, ["probabilities"]).agreed
    only_label = compare_outputs(baseline, candidate, types, ["label"])
    assert not only_label.agreed
    assert only_label.drift is None


def test_drift_is_the_largest_over_float_outputs() -> None:
    baseline = {"a": np.array([1.0, 0.0]), "b": np.array([1.0, 0.0])}
    candidate = {"a": np.array([1.0, 0.0]), "b": np.array([0.0, 1.0])}
    result = compare_outputs(baseline, candidate, {"a": "FP64", "b": "FP64"})
    assert result.drift == pytest.approx(1.0)


def test_missing_output_disagrees_and_drifts() -> None:
    baseline = {"scores": np.array([[0.2, 0.8]])}
    result = compare_outputs(baseline, {}, {"scores": "FP32"})
    assert not result.agreed
    assert result.drift == UNCOMPARABLE_DRIFT
