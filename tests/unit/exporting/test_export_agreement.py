"""The comparison between an exported ONNX model and its original: tolerance, NaNs, labels, shapes."""

from __future__ import annotations

import numpy as np
import pytest

from conch.exporting import ATOL, RTOL, DisagreementError
from conch.exporting.agreement import Reference, check_agreement, compare


def test_float32_rounding_is_within_tolerance() -> None:
    original = np.random.default_rng(0).normal(0, 1000, (50, 3))
    assert compare(original, original.astype(np.float32)) is None


def test_a_difference_beyond_tolerance_is_reported_with_its_worst_place() -> None:
    original = np.array([[0.25, 0.75], [0.5, 0.5], [0.9, 0.1]])
    onnx = original.copy()
    onnx[2, 1] += 0.05
    onnx[0, 0] += 10 * (ATOL + RTOL * 0.25)

    detail = compare(original, onnx)

    assert detail is not None
    assert detail.startswith("2 of 6 elements differ")
    assert "worst at [2, 1]: original 0.1, ONNX 0.15 (absolute difference 0.05, relative 0.5)" in detail


def test_nans_must_be_in_the_same_places() -> None:
    original = np.array([1.0, np.nan, 3.0, np.nan])
    assert compare(original, np.array([1.0, np.nan, 3.0, np.nan], dtype=np.float32)) is None

    detail = compare(original, np.array([1.0, 2.0, 3.0, np.nan]))

    assert (
        detail
        == "1 of 4 elements differ; NaN in different places at 1 elements, first at [1]: original nan, ONNX 2"
    )


def test_labels_must_be_equal() -> None:
    detail = compare(np.array(["yes", "no", "no"]), np.array(["yes", "no", "yes"], dtype=object))
    assert detail == "1 of 3 elements differ; first at [2]: original 'no', ONNX 'yes'"
    assert compare(np.array([0, 2, 1]), np.array([[0], [2], [1]], dtype=np.int64)) is None


def test_a_different_number_of_elements_is_a_shape_difference() -> None:
    assert compare(np.zeros((4, 3)), np.zeros((4, 2))) == "shape [4, 2], the original's is [4, 3]"


def test_check_agreement_names_every_output_that_differs() -> None:
    references = {
        "label": Reference("predict", np.array([1, 0])),
        "probabilities": Reference("predict_proba", np.array([[0.2, 0.8], [0.6, 0.4]])),
    }
    outputs = {"label": np.array([1, 1]), "probabilities": np.array([[0.2, 0.8], [0.6, 0.4]])}

    with pytest.raises(DisagreementError) as raised:
        check_agreement(references, outputs)

    assert [(d.output, d.method) for d in raised.value.disagreements] == [("label", "predict")]
    assert "output 'label' (predict): 1 of 2 elements differ" in str(raised.value)
