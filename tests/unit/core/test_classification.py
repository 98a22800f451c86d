"""Top-K classification: the ranking and the text of each class, as Triton answers them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conch.core.classification import class_count, labels_for, top_k
from conch.core.errors import InvalidArgumentError, UnavailableError


def expected(row: np.ndarray, k: int, labels: list[str] | None = None) -> list[bytes]:
    order = np.argsort(-row.astype(np.float64), kind="stable")[:k]
    texts = [f"{row[i]:f}:{i}" if row.dtype.kind == "f" else f"{row[i]}:{i}" for i in order]
    if labels is not None:
        texts = [f"{text}:{labels[i]}" for text, i in zip(texts, order, strict=True)]
    return [text.encode() for text in texts]


def test_a_batch_is_ranked_row_by_row_as_numpy_sorts_it() -> None:
    values = np.random.default_rng(7).random((5, 10)).astype(np.float32)

    ranked = top_k("probs", values, 3, batching=True)

    assert ranked.shape == (5, 3)
    for row, answer in zip(values, ranked, strict=True):
        assert answer.tolist() == expected(row, 3)


def test_a_model_without_batching_ranks_the_whole_tensor() -> None:
    values = np.random.default_rng(8).random((2, 3)).astype(np.float64)

    ranked = top_k("probs", values, 4, batching=False)

    assert ranked.shape == (4,)
    assert ranked.tolist() == expected(values.ravel(), 4)


def test_scores_have_six_decimals_and_labels_follow_the_index() -> None:
    ranked = top_k("p", np.array([[0.25, 0.5, 0.125]], dtype=np.float32), 2, True, ["cat", "dog", "owl"])

    assert ranked.tolist() == [[b"0.500000:1:dog", b"0.250000:0:cat"]]


def test_integer_scores_have_no_decimals_and_k_is_capped_by_the_classes() -> None:
    ranked = top_k("votes", np.array([[3, 9, 1]], dtype=np.int32), 10, True)

    assert ranked.tolist() == [[b"9:1", b"3:0", b"1:2"]]


def test_ties_keep_the_lower_index_first() -> None:
    assert top_k("p", np.array([1, 3, 3, 2], dtype=np.uint8), 3, False).tolist() == [b"3:1", b"3:2", b"2:3"]


def test_an_index_beyond_the_labels_has_no_label() -> None:
    assert top_k("p", np.array([0.0, 1.0], dtype=np.float32), 2, False, ["only"]).tolist() == [
        b"1.000000:1",
        b"0.000000:0:only",
    ]


@pytest.mark.parametrize("values", [np.array([True, False]), np.array([1.0], dtype=np.float16)])
def test_types_triton_does_not_rank_are_refused(values: np.ndarray) -> None:
    with pytest.raises(InvalidArgumentError, match=r"^class result not available for output 'p' due to"):
        top_k("p", values, 1, False)


@pytest.mark.parametrize("value", [0, -1, 1.5, "3", True])
def test_the_class_count_is_a_whole_number_of_at_least_one(value: object) -> None:
    with pytest.raises(InvalidArgumentError, match="invalid value for 'classification' parameter"):
        class_count("p", value)


def test_labels_are_the_lines_of_the_file_and_are_read_again_when_it_changes(tmp_path: Path) -> None:
    (tmp_path / "labels.txt").write_text("cat\r\ndog\n")
    assert labels_for(tmp_path, "labels.txt", "m") == ["cat", "dog"]

    (tmp_path / "labels.txt").write_text("cat\ndog\nowl, the bird\n")
    assert labels_for(tmp_path, "labels.txt", "m") == ["cat", "dog", "owl, the bird"]
    assert labels_for(tmp_path, "", "m") is None


@pytest.mark.parametrize("name", ["missing.txt", "../labels.txt", "/etc/passwd"])
def test_a_label_file_outside_the_folder_or_missing_is_refused_without_a_path(
    tmp_path: Path, name: str
) -> None:
    with pytest.raises(UnavailableError) as caught:
        labels_for(tmp_path, name, "m")

    assert str(tmp_path) not in caught.value.message
    assert f"'{name}'" in caught.value.message
