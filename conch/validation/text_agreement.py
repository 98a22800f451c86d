"""The expected agreement of two versions of an exported text classifier
(:mod:`conch.exporting.text_classifier`), measured by their served runner on reference texts, one
text taken as one request, with the release gate's comparison.

Why its own module: the ONNX comparison (:mod:`conch.validation.expected_agreement`) runs graphs,
while a text classifier's version is a tokenizer and an encoder run by its runner.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from conch.exporting import text_classifier_runner as runner
from conch.exporting.errors import ExportError
from conch.exporting.text_classifier import sample_texts
from conch.release.compare import compare_outputs
from conch.release.expected_agreement import ExpectedAgreement
from conch.validation.agreement_interval import MIN_REFERENCE_ROWS, ReferenceError, wilson_interval


def is_exported_text_classifier(version_dir: Path) -> bool:
    """A version folder this module wrote (its runner's settings are there)."""
    return (version_dir / runner.SETTINGS_FILENAME).is_file()


def measure_text_versions(model_dir: Path, candidate: int, against: int, reference: Any) -> ExpectedAgreement:
    """The expected agreement of two text-classifier versions on reference texts (a list, a Series or a
    one-column frame): the release gate's comparison (``compare_outputs``), one text taken as one
    request, each version run by its served runner."""
    try:
        texts = sample_texts(reference)
    except ExportError as exc:
        raise ReferenceError(str(exc)) from None
    if len(texts) < MIN_REFERENCE_ROWS:
        raise ReferenceError(f"the reference has {len(texts)} texts; give at least {MIN_REFERENCE_ROWS}")
    new = runner.TextClassifier(model_dir / str(candidate))
    answers = [new.classify(texts), runner.TextClassifier(model_dir / str(against)).classify(texts)]
    answers.append(new.classify(texts))
    datatypes = {"label": "BYTES", "logits": "FP32", "probabilities": "FP32"}

    def agreeing(first: dict[str, np.ndarray], second: dict[str, np.ndarray]) -> int:
        rows = range(len(texts))
        return sum(
            compare_outputs(
                {name: values[i : i + 1] for name, values in first.items()},
                {name: values[i : i + 1] for name, values in second.items()},
                datatypes,
            ).agreed
            for i in rows
        )

    count = agreeing(answers[1], answers[0])
    lower, upper = wilson_interval(count, len(texts))
    itself = agreeing(answers[0], answers[2]) / len(texts)
    return ExpectedAgreement(count / len(texts), lower, upper, len(texts), against, itself)
