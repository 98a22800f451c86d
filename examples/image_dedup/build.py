"""Build the generated files of the image_dedup example repository from scikit-learn's digits.

``conch serve examples/image_dedup`` serves a small near-duplicate finder for 8x8 digit images: a
client sends a PNG, the server answers the ids of the three most similar images of a catalogue, and
how far each is. The configs and the two ``model.py`` files are written by hand; two files are made by
this script, from ``load_digits`` (1797 images, bundled with scikit-learn, nothing is downloaded):

* ``digit-embedder/1/model.onnx``: a small MLP (64 -> 64 -> 32 ReLU units -> 10 classes) trained
  to classify the digits, converted with skl2onnx and cut after its second hidden layer, so it maps
  an image to a 32-value embedding; images of the same digit drawn alike land close together.
* ``digit-dedup/1/digits.faiss``: a faiss ``IndexFlatL2`` of the embeddings of all 1797 images, so an
  id the server answers is the image's position in ``load_digits()``.

Each image is treated as the PNG a client would send: its 0..16 intensities become 8-bit grey levels
(``rint(v * 255 / 16)``), which is what ``catalogue_images`` returns and what the tests encode, and
the network is trained on those levels scaled to 0..1, the exact values ``digit-preprocess``
computes from the decoded PNG. A catalogue image sent as a PNG therefore finds itself at distance 0.

Determinism: the split and the MLP are seeded and trained on one BLAS thread; the ONNX file carries
no timestamp; the index holds embeddings computed in float64 with numpy from the MLP's weights and
rounded to float32, so they do not depend on ONNX Runtime's kernels or the machine's cores. Running
the script twice on one machine writes byte-identical files; on another processor OpenBLAS picks other
kernels and the weights move in their last bits (7e-6 on an AMD EPYC), the graph stays the same.
Before anything is written, the ONNX graph is run in ONNX Runtime on every image and compared with
those embeddings.

Usage::

    python examples/image_dedup/build.py [--output DIR]

Needs the ``examples`` extra (scikit-learn, skl2onnx, faiss-cpu; Pillow to serve).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import faiss
import numpy as np
import onnx
import onnx.utils
import onnxruntime as ort
from skl2onnx import convert_sklearn
from skl2onnx.common.data_types import FloatTensorType
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier
from threadpoolctl import threadpool_limits

SEED = 0
HIDDEN_LAYERS = (64, 32)
EMBEDDING_SIZE = HIDDEN_LAYERS[-1]
# Pinned so the file does not change with the skl2onnx version (the graph uses MatMul, Add and Relu).
TARGET_OPSET = {"": 17, "ai.onnx.ml": 3}
PRODUCER_NAME = "conch.examples.image_dedup.build"
# skl2onnx's name for the activation of the MLP's second hidden layer; the graph is cut there.
LAST_HIDDEN_ACTIVATION = "next_activations1"
# float32 in ONNX Runtime against float64 in numpy, on activations up to about 10.
EMBEDDING_ATOL = 1e-4
DEFAULT_OUTPUT = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Built:
    """What the build made, for its summary."""

    held_out_accuracy: float
    model_bytes: bytes
    index_bytes: bytes
    worst_difference: float


def catalogue_images() -> np.ndarray:
    """The 1797 digits as 8-bit grey images (N, 8, 8): the pixels of the PNG a client sends."""
    images = load_digits().images
    return np.rint(images * (255 / 16)).astype(np.uint8)


def model_input(grey: np.ndarray) -> np.ndarray:
    """Grey levels to the embedder's ``pixels`` (N, 64) in 0..1, as ``digit-preprocess`` computes them."""
    return grey.reshape(len(grey), -1).astype(np.float32) / 255.0


def train(pixels: np.ndarray, labels: np.ndarray) -> tuple[MLPClassifier, float]:
    """The classifier whose hidden layers become the embedder, and its accuracy on a held-out quarter."""
    x_train, x_test, y_train, y_test = train_test_split(
        pixels, labels, test_size=0.25, random_state=SEED, stratify=labels
    )
    # One BLAS thread: the weights then do not depend on how matrix products are split between cores.
    # Adam stops after 228 epochs with this seed; 500 leaves room without a ConvergenceWarning.
    with threadpool_limits(limits=1, user_api="blas"):
        mlp = MLPClassifier(hidden_layer_sizes=HIDDEN_LAYERS, max_iter=500, random_state=SEED)
        mlp.fit(x_train, y_train)
    return mlp, float(np.mean(mlp.predict(x_test) == y_test))


def embeddings(mlp: MLPClassifier, pixels: np.ndarray) -> np.ndarray:
    """The hidden layers' activations in float64, rounded once to float32: what the index holds."""
    activations = pixels.astype(np.float64)
    for weights, biases in zip(mlp.coefs_[:-1], mlp.intercepts_[:-1], strict=True):
        activations = np.maximum(activations @ weights + biases, 0.0)
    return activations.astype(np.float32)


def embedder_graph(mlp: MLPClassifier) -> onnx.ModelProto:
    """skl2onnx's graph of the classifier, cut after the last hidden layer, whose output is renamed."""
    full = convert_sklearn(
        mlp,
        name="digit-embedder",
        initial_types=[("pixels", FloatTensorType([None, 64]))],
        options={"zipmap": False},
        target_opset=TARGET_OPSET,
    )
    with tempfile.TemporaryDirectory() as folder:
        # onnx.utils.extract_model keeps the nodes the output needs and drops the rest (softmax,
        # argmax, the class labels); it works on files.
        whole, cut = Path(folder) / "full.onnx", Path(folder) / "cut.onnx"
        onnx.save(full, whole)
        onnx.utils.extract_model(str(whole), str(cut), ["pixels"], [LAST_HIDDEN_ACTIVATION])
        model = onnx.load(cut)
    for node in model.graph.node:
        node.output[:] = ["embedding" if out == LAST_HIDDEN_ACTIVATION else out for out in node.output]
    model.graph.output[0].name = "embedding"
    # The cut loses the batch dimension's name (the input's becomes unnamed): name both.
    for value in (model.graph.input[0], model.graph.output[0]):
        value.type.tensor_type.shape.dim[0].dim_param = "N"
    # Fixed metadata and sorted opset imports (skl2onnx collects them in a set): the bytes depend on
    # the weights only. The cut graph needs the default domain alone.
    opsets = [opset for opset in model.opset_import if opset.domain == ""]
    del model.opset_import[:]
    model.opset_import.extend(opsets)
    model.producer_name = PRODUCER_NAME
    model.producer_version = ""
    model.doc_string = (
        f"digit-embedder: 8x8 grey digits (64 values in 0..1) to {EMBEDDING_SIZE}-value embeddings, the "
        "last hidden layer of an MLP trained on load_digits. Built by examples/image_dedup/build.py."
    )
    model.graph.name = "digit-embedder"
    onnx.checker.check_model(model, full_check=True)
    return model


def verify(model_bytes: bytes, pixels: np.ndarray, expected: np.ndarray) -> float:
    """Run the graph in ONNX Runtime on every image; the largest difference from the index's values."""
    session = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    (answered,) = session.run(["embedding"], {"pixels": pixels})
    if answered.dtype != np.float32 or answered.shape != expected.shape:
        raise AssertionError(f"embedding is {answered.dtype} {answered.shape}, want float32 {expected.shape}")
    worst = float(np.max(np.abs(answered - expected)))
    if worst > EMBEDDING_ATOL:
        raise AssertionError(f"ONNX Runtime's embeddings differ from numpy's by up to {worst:.3g}")
    return worst


def index_bytes(catalogue: np.ndarray) -> bytes:
    """A flat (exact) L2 index; its ids are the rows' positions, so the positions in load_digits()."""
    index = faiss.IndexFlatL2(catalogue.shape[1])
    index.add(catalogue)
    return faiss.serialize_index(index).tobytes()


def build() -> Built:
    grey = catalogue_images()
    pixels = model_input(grey)
    mlp, accuracy = train(pixels, load_digits().target)
    catalogue = embeddings(mlp, pixels)
    model_bytes = embedder_graph(mlp).SerializeToString(deterministic=True)
    worst = verify(model_bytes, pixels, catalogue)
    return Built(accuracy, model_bytes, index_bytes(catalogue), worst)


def write(built: Built, output: Path) -> list[Path]:
    written = [
        (output / "digit-embedder" / "1" / "model.onnx", built.model_bytes),
        (output / "digit-dedup" / "1" / "digits.faiss", built.index_bytes),
    ]
    for path, content in written:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    return [path for path, _ in written]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--output", type=Path, default=DEFAULT_OUTPUT, help=f"repository folder (default: {DEFAULT_OUTPUT})"
    )
    output: Path = parser.parse_args(argv).output
    built = build()
    print(f"classifier held-out accuracy: {built.held_out_accuracy:.4f}")
    print(f"ONNX Runtime vs numpy embeddings: largest difference {built.worst_difference:.2g}")
    for path in write(built, output):
        shown = path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path
        print(f"wrote {shown} ({path.stat().st_size / 1024:.1f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
