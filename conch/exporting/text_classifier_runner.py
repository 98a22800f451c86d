"""The served form of a transformer text classifier: raw text in, tokenized and classified in one model.

``conch.export`` copies this file into the version folder as the Python model's ``model.py``, beside
the tokenizer (``tokenizer.json``, read by the ``tokenizers`` library, the Rust tokenizer that the
notebook's fast tokenizer is made of), the encoder as ONNX (``classifier.onnx``, run by ONNX Runtime in
the model's process) and ``text_classifier.json`` (input names, maximum length, labels, the function
applied to the logits). It imports nothing of conch's, so it runs in any environment with numpy,
onnxruntime and tokenizers; the export checks the notebook's pipeline against :class:`TextClassifier`
itself, so what was checked is what is served.

A batch (every request the dynamic batcher gathered) is tokenized together and padded to its longest
text, up to the model's maximum length; longer texts are cut there, as the pipeline's tokenizer does
with ``truncation=True``. Text that is not UTF-8 fails its own request with INVALID_ARG (a 400),
naming the input and the element; the other requests of the batch are answered.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

SETTINGS_FILENAME = "text_classifier.json"
TOKENIZER_FILENAME = "tokenizer.json"
ENCODER_FILENAME = "classifier.onnx"
TEXT_INPUT = "text"
#: The tokenizer's output that feeds each encoder input.
_ENCODING_FIELDS = {"input_ids": "ids", "attention_mask": "attention_mask", "token_type_ids": "type_ids"}


class TextClassifier:
    """Tokenizer and ONNX encoder of one version folder; :meth:`classify` maps texts to outputs."""

    def __init__(self, folder: Path, threads: int = 1) -> None:
        import onnxruntime
        from tokenizers import Tokenizer

        self.settings = json.loads((folder / SETTINGS_FILENAME).read_text(encoding="utf-8"))
        self.labels = np.array([label.encode() for label in self.settings["labels"]], dtype=object)
        self.tokenizer = Tokenizer.from_file(str(folder / TOKENIZER_FILENAME))
        self.tokenizer.enable_truncation(
            self.settings["max_length"], direction=self.settings["truncation_side"]
        )
        self.tokenizer.enable_padding(
            direction=self.settings["padding_side"],
            pad_id=self.settings["pad_id"],
            pad_token=self.settings["pad_token"],
        )
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        self.session = onnxruntime.InferenceSession(
            str(folder / ENCODER_FILENAME), options, providers=["CPUExecutionProvider"]
        )

    def classify(self, texts: list[str]) -> dict[str, np.ndarray]:
        """``logits`` and ``probabilities`` [N, labels] (float32), and ``label`` [N, 1] (bytes)."""
        encodings = self.tokenizer.encode_batch(texts)
        feeds = {
            name: np.array([getattr(e, _ENCODING_FIELDS[name]) for e in encodings], dtype=np.int64)
            for name in self.settings["encoder_inputs"]
        }
        (logits,) = self.session.run(["logits"], feeds)
        logits = logits.astype(np.float32)
        return {
            "logits": logits,
            "probabilities": _activation(self.settings["function_to_apply"], logits),
            "label": self.labels[np.argmax(logits, axis=1)].reshape(-1, 1),
        }


def _activation(name: str, logits: np.ndarray) -> np.ndarray:
    if name == "sigmoid":
        return (1.0 / (1.0 + np.exp(-logits))).astype(np.float32)
    if name == "none":
        return logits
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return (shifted / shifted.sum(axis=1, keepdims=True)).astype(np.float32)


def decode_texts(values: np.ndarray) -> list[str] | str:
    """The texts of a BYTES tensor, or what is wrong with it (an element that is not UTF-8)."""
    texts = []
    for index, value in enumerate(values.ravel()):
        if isinstance(value, str):
            texts.append(value)
            continue
        try:
            texts.append(bytes(value).decode("utf-8"))
        except UnicodeDecodeError as exc:
            return (
                f"input '{TEXT_INPUT}': element {index} is not valid UTF-8 (byte {exc.start}); send text "
                "encoded as UTF-8"
            )
        except TypeError:
            return f"input '{TEXT_INPUT}': element {index} is not text; send strings as BYTES"
    return texts


class TritonPythonModel:
    """The Python backend's entry point: one :class:`TextClassifier` per instance."""

    def initialize(self, args: dict[str, Any]) -> None:
        self.classifier = TextClassifier(Path(__file__).resolve().parent)

    def execute(self, requests: list[Any]) -> list[Any]:
        import triton_python_backend_utils as pb_utils

        texts_of: list[list[str] | str] = []
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, TEXT_INPUT).as_numpy()
            texts_of.append(decode_texts(values))
        texts = [text for batch in texts_of if not isinstance(batch, str) for text in batch]
        outputs = self.classifier.classify(texts) if texts else {}
        responses, start = [], 0
        for batch in texts_of:
            if isinstance(batch, str):
                error = pb_utils.TritonError(batch, pb_utils.TritonError.INVALID_ARG)
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            rows = slice(start, start + len(batch))
            start += len(batch)
            tensors = [pb_utils.Tensor(name, values[rows]) for name, values in outputs.items()]
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
        return responses
