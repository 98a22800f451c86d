"""Build the example model repository that ships with conch.

``conch serve`` with no argument serves ``examples/model_repository/``. The ONNX files in it are
committed, but they are generated: this script rebuilds them from data sets bundled with
scikit-learn (iris and digits, nothing is downloaded), so anyone can check where the models come
from, change them, and reproduce them. Seeds are fixed and the ONNX files carry no timestamps, so
running it twice writes byte-identical files.

Three models are written:

* ``iris-pipeline``   StandardScaler + LogisticRegression on iris, with a hand-written config.pbtxt.
* ``digits-mlp``      MinMaxScaler + MLPClassifier on the 8x8 digits, with dynamic batching.
* ``iris-autoconfig`` a small RandomForest on iris with *no* config.pbtxt, to show auto-complete.

The repository's fourth model, ``text-length``, is a Python-backend model written by hand; this
script leaves its folder alone.

Every exported graph is checked in onnxruntime against the scikit-learn model (labels equal,
probabilities within 1e-5) before it is written.

Usage::

    python examples/build_model_repository.py [--output DIR]

Needs the ``examples`` extra (scikit-learn, skl2onnx).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from skl2onnx import convert_sklearn
from skl2onnx.common.data_types import FloatTensorType, Int64TensorType
from sklearn.base import ClassifierMixin
from sklearn.datasets import load_digits, load_iris
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import MinMaxScaler, StandardScaler
from threadpoolctl import threadpool_limits

SEED = 0
TEST_SIZE = 0.25
# Pinned rather than "latest" so the files do not change with the skl2onnx version and stay loadable
# by older onnxruntime builds (Triton's onnxruntime backend included).
TARGET_OPSET = {"": 17, "ai.onnx.ml": 3}
PRODUCER_NAME = "conch.examples.build_model_repository"
PROBABILITY_ATOL = 1e-5
DEFAULT_OUTPUT = Path(__file__).resolve().parent / "model_repository"

IRIS_PIPELINE_CONFIG = """\
name: "iris-pipeline"
platform: "onnxruntime_onnx"
max_batch_size: 64
input [ { name: "input" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [
  { name: "label" data_type: TYPE_INT64 dims: [ 1 ] reshape: { shape: [ ] } },
  { name: "probabilities" data_type: TYPE_FP32 dims: [ 3 ] }
]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

DIGITS_MLP_CONFIG = """\
name: "digits-mlp"
platform: "onnxruntime_onnx"
max_batch_size: 32
input [ { name: "pixels" data_type: TYPE_FP32 dims: [ 64 ] } ]
output [
  { name: "label" data_type: TYPE_INT64 dims: [ 1 ] reshape: { shape: [ ] } },
  { name: "probabilities" data_type: TYPE_FP32 dims: [ 10 ] }
]
dynamic_batching { preferred_batch_size: [ 8, 16 ] max_queue_delay_microseconds: 500 }
instance_group [ { count: 1 kind: KIND_CPU } ]
"""


@dataclass(frozen=True)
class DataSplit:
    """A data set split into a training part and a held-out test part."""

    name: str
    x_train: np.ndarray
    x_test: np.ndarray
    y_train: np.ndarray
    y_test: np.ndarray

    @property
    def x_all(self) -> np.ndarray:
        return np.concatenate([self.x_train, self.x_test])

    @property
    def n_classes(self) -> int:
        return int(np.unique(np.concatenate([self.y_train, self.y_test])).size)


@dataclass(frozen=True)
class ModelSpec:
    """How to build one model of the repository."""

    name: str
    description: str
    load_data: Callable[[], DataSplit]
    make_estimator: Callable[[], ClassifierMixin]
    input_name: str
    config: str | None  # None: no config.pbtxt, the server auto-completes it


@dataclass(frozen=True)
class BuildResult:
    name: str
    data_set: str
    accuracy: float
    size_bytes: int


def split(name: str, x: np.ndarray, y: np.ndarray) -> DataSplit:
    # float32 from the start: the served model sees FP32, so train and verify on the same values.
    x_train, x_test, y_train, y_test = train_test_split(
        x.astype(np.float32), y.astype(np.int64), test_size=TEST_SIZE, random_state=SEED, stratify=y
    )
    return DataSplit(name, x_train, x_test, y_train, y_test)


def load_iris_split() -> DataSplit:
    data = load_iris()
    return split("iris", data.data, data.target)


def load_digits_split() -> DataSplit:
    data = load_digits()
    return split("digits (8x8)", data.data, data.target)


def make_iris_pipeline() -> Pipeline:
    return Pipeline(
        [
            ("scaler", StandardScaler()),
            ("classifier", LogisticRegression(max_iter=1000, random_state=SEED)),
        ]
    )


def make_digits_mlp() -> Pipeline:
    # MinMaxScaler maps the 0..16 pixel intensities to about 0..1 inside the graph, so clients send
    # raw pixel values. Adam converges after 343 epochs with this seed; 400 leaves room without a
    # ConvergenceWarning.
    return Pipeline(
        [
            ("scaler", MinMaxScaler()),
            ("classifier", MLPClassifier(hidden_layer_sizes=(64,), max_iter=400, random_state=SEED)),
        ]
    )


def make_iris_forest() -> RandomForestClassifier:
    return RandomForestClassifier(n_estimators=10, max_depth=3, random_state=SEED)


MODELS: tuple[ModelSpec, ...] = (
    ModelSpec(
        name="iris-pipeline",
        description="StandardScaler + LogisticRegression on iris",
        load_data=load_iris_split,
        make_estimator=make_iris_pipeline,
        input_name="input",
        config=IRIS_PIPELINE_CONFIG,
    ),
    ModelSpec(
        name="digits-mlp",
        description="MinMaxScaler + MLPClassifier(64) on 8x8 digits",
        load_data=load_digits_split,
        make_estimator=make_digits_mlp,
        input_name="pixels",
        config=DIGITS_MLP_CONFIG,
    ),
    ModelSpec(
        name="iris-autoconfig",
        description="RandomForest(10 trees, depth 3) on iris, no config.pbtxt",
        load_data=load_iris_split,
        make_estimator=make_iris_forest,
        input_name="input",
        config=None,
    ),
)


def to_onnx(spec: ModelSpec, estimator: ClassifierMixin, data: DataSplit) -> onnx.ModelProto:
    """Convert with zipmap off and the output names the configs use: label [N], probabilities [N, C]."""
    n_features = data.x_train.shape[1]
    model = convert_sklearn(
        estimator,
        name=spec.name,
        initial_types=[(spec.input_name, FloatTensorType([None, n_features]))],
        final_types=[
            ("label", Int64TensorType([None])),
            ("probabilities", FloatTensorType([None, data.n_classes])),
        ],
        options={"zipmap": False},
        target_opset=TARGET_OPSET,
    )
    # Fixed metadata, no timestamps or paths: the serialized bytes depend only on the model.
    # skl2onnx collects the opset imports in a set, so their order follows Python's per-process
    # string hash seed; sort them by domain.
    opsets = sorted(model.opset_import, key=lambda opset: opset.domain)
    del model.opset_import[:]
    model.opset_import.extend(opsets)
    model.producer_name = PRODUCER_NAME
    model.producer_version = ""
    model.doc_string = f"{spec.name}: {spec.description}. Built by examples/build_model_repository.py."
    model.graph.name = spec.name
    onnx.checker.check_model(model, full_check=True)
    return model


def verify(model_bytes: bytes, spec: ModelSpec, estimator: ClassifierMixin, data: DataSplit) -> None:
    """Run the ONNX model in onnxruntime and compare it with the scikit-learn model on all samples."""
    session = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    x = data.x_all
    labels, probabilities = session.run(["label", "probabilities"], {spec.input_name: x})
    expected_labels = estimator.predict(x)
    expected_probabilities = estimator.predict_proba(x)
    if labels.dtype != np.int64 or labels.shape != (len(x),):
        raise AssertionError(f"{spec.name}: label is {labels.dtype} {labels.shape}, want int64 ({len(x)},)")
    if probabilities.dtype != np.float32 or probabilities.shape != expected_probabilities.shape:
        raise AssertionError(f"{spec.name}: probabilities is {probabilities.dtype} {probabilities.shape}")
    if not np.array_equal(labels, expected_labels):
        mismatches = int(np.sum(labels != expected_labels))
        raise AssertionError(f"{spec.name}: {mismatches} labels differ between onnxruntime and sklearn")
    max_diff = float(np.max(np.abs(probabilities - expected_probabilities)))
    if max_diff > PROBABILITY_ATOL:
        raise AssertionError(f"{spec.name}: probabilities differ by up to {max_diff:.3g}")


def write_model(spec: ModelSpec, model_bytes: bytes, output: Path) -> int:
    """Replace output/<name>/ with version 1 of the model and its config, if any; return the file size."""
    model_dir = output / spec.name
    if model_dir.exists():
        shutil.rmtree(model_dir)
    version_dir = model_dir / "1"
    version_dir.mkdir(parents=True)
    model_path = version_dir / "model.onnx"
    model_path.write_bytes(model_bytes)
    if spec.config is not None:
        (model_dir / "config.pbtxt").write_text(spec.config, encoding="utf-8")
    return model_path.stat().st_size


def build(spec: ModelSpec, output: Path) -> BuildResult:
    data = spec.load_data()
    estimator = spec.make_estimator()
    estimator.fit(data.x_train, data.y_train)
    accuracy = float(np.mean(estimator.predict(data.x_test) == data.y_test))
    model_bytes = to_onnx(spec, estimator, data).SerializeToString(deterministic=True)
    verify(model_bytes, spec, estimator, data)
    size = write_model(spec, model_bytes, output)
    return BuildResult(spec.name, data.name, accuracy, size)


def print_table(results: list[BuildResult]) -> None:
    header = f"{'model':<16} {'data set':<14} {'held-out accuracy':>17} {'model.onnx':>11}"
    print(header)
    print("-" * len(header))
    for result in results:
        size = f"{result.size_bytes / 1024:.1f} KiB"
        print(f"{result.name:<16} {result.data_set:<14} {result.accuracy:>17.4f} {size:>11}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--output",
        type=Path,
        default=DEFAULT_OUTPUT,
        help=f"model repository folder to write (default: {DEFAULT_OUTPUT})",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    output: Path = args.output
    output.mkdir(parents=True, exist_ok=True)
    # The MLP's weights depend on how BLAS splits its matrix products between threads, so train with a
    # single BLAS thread: the result is then the same whatever the number of cores.
    with threadpool_limits(limits=1, user_api="blas"):
        results = [build(spec, output) for spec in MODELS]
    print_table(results)
    print(f"\nwrote {len(results)} models to {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
