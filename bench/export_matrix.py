"""The export matrix of boosted trees and transformer text classifiers: per model, the export time,
and on rows the export never saw, label agreement and the largest difference from the notebook.

    .venv/bin/python -m bench.export_matrix

Prints a Markdown table. The exported models run in ONNX Runtime (the text classifier through its
served runner, tokenizer included), as ``conch serve`` runs them; the served answers over HTTP and
gRPC are the same bytes (tests/integration/test_export_boosted_trees_serve.py,
test_export_text_classifier.py).
"""

from __future__ import annotations

import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pandas as pd

from conch.exporting import export
from conch.exporting.text_classifier_runner import TextClassifier
from tests.fixtures import boosted_models
from tests.fixtures.boosted_models import LIBRARIES, applicants, measurements
from tests.fixtures.text_classifiers import CORPUS, LABELS, review_pipeline

ROWS = 200
TEXTS = [*CORPUS, "ÉCOLE Naïve 😀", "", "a very long review " * 80] * 4


def run_onnx(version_dir: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(str(version_dir / "model.onnx"))
    names = [output.name for output in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds), strict=True))


def frame_feeds(frame: Any) -> dict[str, np.ndarray]:
    return {
        "age": frame[["age"]].to_numpy(np.float32),
        "income": frame[["income"]].to_numpy(np.float32),
        "city": frame[["city"]].to_numpy(object),
    }


def timed_export(model: Any, sample: Any, repository: Path, name: str) -> tuple[Path, float]:
    start = time.perf_counter()
    version_dir = export(model, sample, repository=repository, name=name)
    return version_dir, time.perf_counter() - start


def row(name: str, seconds: float, labels: tuple[np.ndarray, np.ndarray] | None, gap: float) -> str:
    agreement = "n/a (regressor)" if labels is None else f"{np.mean(labels[0] == labels[1]):.1%}"
    return f"| {name} | {seconds:.2f} s | {agreement} | {gap:.2g} |"


def boosted_rows(repository: Path) -> list[str]:
    lines = []
    held_out, frame = measurements(ROWS, seed=99), applicants(ROWS, seed=99)
    for library in LIBRARIES:
        model = boosted_models.classifier(library)
        version_dir, seconds = timed_export(model, measurements(20, seed=1), repository, f"{library}-clf")
        served = run_onnx(version_dir, {"input": held_out})
        gap = np.abs(served["probabilities"] - model.predict_proba(held_out)).max()
        labels = (served["label"].ravel(), np.asarray(model.predict(held_out)).ravel())
        lines.append(row(f"{library} classifier", seconds, labels, gap))

        model = boosted_models.regressor(library)
        version_dir, seconds = timed_export(model, measurements(20, seed=1), repository, f"{library}-reg")
        (predictions,) = run_onnx(version_dir, {"input": held_out}).values()
        expected = model.predict(held_out)
        gap = (np.abs(predictions.ravel() - expected) / np.maximum(np.abs(expected), 1)).max()
        lines.append(row(f"{library} regressor (relative)", seconds, None, gap))

        columns = ["age", "income", "debt ratio", "score", "tenure"]
        frame_rows = pd.DataFrame(measurements(150), columns=columns)
        model = boosted_models.fitted_on(library, frame_rows)
        version_dir, seconds = timed_export(model, frame_rows.head(20), repository, f"{library}-frame")
        held_frame = pd.DataFrame(held_out, columns=columns)
        feeds = {c.replace(" ", "_"): held_frame[[c]].to_numpy(np.float32) for c in columns}
        served = run_onnx(version_dir, feeds)
        gap = np.abs(served["probabilities"] - model.predict_proba(held_frame)).max()
        labels = (served["label"].ravel(), np.asarray(model.predict(held_frame)).ravel())
        lines.append(row(f"{library} classifier fitted on a DataFrame", seconds, labels, gap))

        model = boosted_models.pipeline(library)
        version_dir, seconds = timed_export(model, applicants(30, seed=1), repository, f"{library}-pipe")
        served = run_onnx(version_dir, frame_feeds(frame))
        gap = np.abs(served["probabilities"] - model.predict_proba(frame)).max()
        labels = (served["label"].ravel(), model.predict(frame))
        lines.append(row(f"{library} in a ColumnTransformer pipeline", seconds, labels, gap))
    return lines


def text_rows(repository: Path) -> list[str]:
    lines = []
    for architecture in ("bert", "distilbert"):
        pipeline = review_pipeline(repository, architecture=architecture)
        version_dir, seconds = timed_export(pipeline, CORPUS[:4], repository, architecture)
        served = TextClassifier(version_dir).classify(TEXTS)
        answers = pipeline(TEXTS, top_k=None, truncation=True)
        scores = np.array(
            [[next(a["score"] for a in ans if a["label"] == lab) for lab in LABELS] for ans in answers]
        )
        firsts = np.array([max(answer, key=lambda a: a["score"])["label"] for answer in answers])
        labels = (np.array([value.decode() for value in served["label"].ravel()]), firsts)
        gap = np.abs(served["probabilities"] - scores).max()
        lines.append(row(f"tiny {architecture} text classifier", seconds, labels, gap))
        lines[-1] += f" logits {np.abs(served['logits'] - _logits(pipeline, TEXTS)).max():.2g} |"
    return lines


def _logits(pipeline: Any, texts: list[str]) -> np.ndarray:
    import torch

    with torch.no_grad():
        return np.array(
            [
                pipeline.model(**pipeline.tokenizer(t, truncation=True, return_tensors="pt"))
                .logits[0]
                .numpy()
                for t in texts
            ]
        )


def main() -> None:
    warnings.filterwarnings("ignore")
    with tempfile.TemporaryDirectory(prefix="conch-export-matrix-") as folder:
        repository = Path(folder)
        lines = boosted_rows(repository) + text_rows(repository)
    print(f"held-out rows: {ROWS} per tabular model, {len(TEXTS)} texts per text classifier")
    print("| model | export time | label agreement | max difference (probabilities) | text: logits |")
    print("|---|---|---|---|---|")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
