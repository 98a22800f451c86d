"""A Hugging Face text-classification pipeline to a served model that takes raw text.

The served model is one Python-backend model folder: its ``model.py`` is
:mod:`conch.exporting.text_classifier_runner`, which tokenizes with the pipeline's own tokenizer
(``tokenizer.json``) and runs the encoder, exported with torch's TorchScript-based ONNX exporter with
dynamic batch and sequence axes, in ONNX Runtime. One folder rather than an ensemble of a tokenizer
model and an ONNX model: a version is then one folder, so versions, packages, installs and releases
treat it like any other model, and a tokenizer can never be served beside another version's encoder.

The check: on the sample, plus rows that tokenizers get wrong most often (capitals with accents, emoji,
an empty string, a text longer than the model's maximum), the runner's probabilities must equal the
pipeline's (``top_k=None, truncation=True``), its logits the model's, and its labels the pipeline's
first answer. The encoder costs about a second to export for a two-layer model.
"""

from __future__ import annotations

import json
import logging
import shutil
import warnings
from datetime import UTC, datetime
from importlib import metadata as distributions
from pathlib import Path
from typing import Any

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from conch.exporting import text_classifier_runner as runner
from conch.exporting.agreement import Reference, check_agreement
from conch.exporting.class_labels import label_filename, write_labels
from conch.exporting.errors import ConfigRewrittenWarning, ExportError
from conch.exporting.model_config import config_text
from conch.exporting.staging import Staging
from conch.exporting.warmup_files import add_warmup
from conch.packaging.metadata import (
    CONFIG_FILENAME,
    ModelMetadata,
    TensorSchema,
    model_file_checksums,
    version_file_checksums,
    write_metadata,
)
from conch.repository.config import parse_config, tensor_metadata

log = logging.getLogger(__name__)

INSTALL_HINT = "pip install 'conch[transformers]' (transformers, tokenizers, torch)"
#: Rows added to the sample for the check: accents and capitals, emoji, nothing, and a long text.
EDGE_TEXTS = ("ÉCOLE Naïve café", "good 😀 bad 😡", "", "word " * 600)
OPSET = 17


def is_text_classifier(model: Any) -> bool:
    """A transformers pipeline or sequence classifier; recognised without importing transformers."""
    from_transformers = type(model).__module__.startswith("transformers.")
    return from_transformers and (
        hasattr(model, "tokenizer") or type(model).__name__.endswith("ForSequenceClassification")
    )


def export_text_classifier(
    pipeline: Any,
    sample: Any,
    model_dir: Path,
    number: int,
    max_batch_size: int,
    described: tuple[str | None, dict[str, Any]],
) -> Path:
    """Export ``pipeline`` as version ``number`` of ``model_dir``; ``sample`` is a few texts."""
    if getattr(pipeline, "tokenizer", None) is None:
        raise ExportError(
            f"{type(pipeline).__name__} has no tokenizer with it: export the notebook's pipeline, "
            "transformers.pipeline('text-classification', model=model, tokenizer=tokenizer), so the "
            "served model tokenizes raw text as the notebook does"
        )
    texts = [*sample_texts(sample), *EDGE_TEXTS]
    settings = _settings(pipeline)
    config = _config(model_dir.name, len(settings["labels"]), max_batch_size)
    written, replaced_because = _config_to_write(model_dir, config)
    model_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Staging(model_dir.parent, model_dir.name, number)
    try:
        folder = staging.version_dir
        log.info("exporting %s's encoder to ONNX", type(pipeline.model).__name__)
        _export_encoder(pipeline, settings["encoder_inputs"], folder / runner.ENCODER_FILENAME)
        pipeline.tokenizer.backend_tokenizer.save(str(folder / runner.TOKENIZER_FILENAME))
        (folder / runner.SETTINGS_FILENAME).write_text(json.dumps(settings, indent=2), encoding="utf-8")
        shutil.copyfile(runner.__file__, folder / "model.py")
        classes = {"probabilities": settings["labels"], "logits": settings["labels"]}
        write_labels(folder, classes)
        if not model_dir.exists():
            write_labels(staging.root, classes)  # where Triton looks: see class_labels
        log.info("running the served tokenizer and encoder on the sample and comparing with the pipeline")
        _check(pipeline, folder, texts, settings["max_length"])
        if written is not None:
            add_warmup(written, {runner.TEXT_INPUT: _text_tensor(texts[:1])}, staging.root)
            (staging.root / CONFIG_FILENAME).write_text(config_text(written), encoding="utf-8")
        if replaced_because is not None:
            warnings.warn(
                f"'{model_dir / CONFIG_FILENAME}' no longer fits the exported model ({replaced_because}); "
                "it was rewritten",
                ConfigRewrittenWarning,
                stacklevel=3,
            )
        model_files_dir = staging.root if written is not None else model_dir
        write_metadata(folder, _metadata(pipeline, config, folder, model_files_dir, described, classes))
        staging.commit(model_files=written is not None)
    finally:
        staging.discard()
    log.info("exported '%s' version %d to %s", model_dir.name, number, model_dir / str(number))
    return model_dir / str(number)


def sample_texts(sample: Any) -> list[str]:
    values = sample.iloc[:, 0] if hasattr(sample, "iloc") and getattr(sample, "ndim", 1) == 2 else sample
    texts = [values] if isinstance(values, str) else list(np.asarray(values, dtype=object).ravel())
    if not texts or not all(isinstance(text, str) for text in texts):
        raise ExportError(
            "a text classifier's sample is a few texts: a list of strings, a Series or a one-column frame"
        )
    return texts


def _settings(pipeline: Any) -> dict[str, Any]:
    """What the runner needs to tokenize and classify as the pipeline does."""
    tokenizer, model = pipeline.tokenizer, pipeline.model
    if getattr(tokenizer, "backend_tokenizer", None) is None:
        raise ExportError(
            "the pipeline's tokenizer is a slow (pure Python) one, which the server cannot run; load it "
            "with use_fast=True (AutoTokenizer.from_pretrained(name, use_fast=True))"
        )
    config = model.config
    limits = [tokenizer.model_max_length, getattr(config, "max_position_embeddings", None)]
    max_length = min(int(limit) for limit in limits if limit is not None and limit < 1_000_000)
    # In the order of the model's forward: the exporter names the traced inputs in that order.
    inputs = [name for name in _forward_parameters(model) if name in tokenizer.model_input_names]
    unknown = [name for name in inputs if name not in ("input_ids", "attention_mask", "token_type_ids")]
    if "input_ids" not in inputs or unknown:
        raise ExportError(
            f"the tokenizer gives {tokenizer.model_input_names}; conch serves encoders that take "
            "input_ids, attention_mask and token_type_ids"
        )
    return {
        "encoder_inputs": inputs,
        "max_length": max_length,
        "truncation_side": tokenizer.truncation_side,
        "padding_side": tokenizer.padding_side,
        "pad_id": int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0),
        "pad_token": str(tokenizer.pad_token or "[PAD]"),
        "labels": [str(config.id2label[index]) for index in range(config.num_labels)],
        "function_to_apply": _function_to_apply(pipeline),
    }


def _forward_parameters(model: Any) -> list[str]:
    import inspect

    return list(inspect.signature(model.forward).parameters)


def _function_to_apply(pipeline: Any) -> str:
    """The pipeline's own choice: sigmoid for one label or multi-label, else softmax."""
    chosen = getattr(pipeline, "_postprocess_params", {}).get("function_to_apply")
    if chosen is not None:
        return str(getattr(chosen, "value", chosen)).lower()
    config = pipeline.model.config
    if config.num_labels == 1 or config.problem_type == "multi_label_classification":
        return "sigmoid"
    return "softmax"


def _export_encoder(pipeline: Any, inputs: list[str], path: Path) -> None:
    import torch

    model = pipeline.model
    encoded = pipeline.tokenizer(["a short text", "and another one, a little longer"], padding=True)
    arguments = {name: torch.tensor(encoded[name], dtype=torch.int64) for name in inputs}
    axes = {name: {0: "batch", 1: "sequence"} for name in inputs}
    training = model.training
    model.eval()
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                model,
                (),
                str(path),
                kwargs=arguments,
                input_names=inputs,
                output_names=["logits"],
                dynamic_axes={**axes, "logits": {0: "batch"}},
                opset_version=OPSET,
                dynamo=False,
            )
    except Exception as exc:  # torch's exporter raises whatever the model's code meets
        raise ExportError(f"torch.onnx.export failed on {type(model).__name__}: {exc}") from exc
    finally:
        model.train(training)


def _check(pipeline: Any, folder: Path, texts: list[str], max_length: int) -> None:
    import torch

    served = runner.TextClassifier(folder).classify(texts)
    labels = [str(pipeline.model.config.id2label[i]) for i in range(pipeline.model.config.num_labels)]
    answers = pipeline(texts, top_k=None, truncation=True)
    probabilities = np.array([[_score(answer, label) for label in labels] for answer in answers])
    first = np.array([max(answer, key=lambda a: a["score"])["label"].encode() for answer in answers])
    logits = []
    with torch.no_grad():
        for text in texts:
            encoded = pipeline.tokenizer(text, truncation=True, max_length=max_length, return_tensors="pt")
            logits.append(pipeline.model(**encoded).logits[0].numpy())
    check_agreement(
        {
            "logits": Reference("the model's forward", np.array(logits)),
            "probabilities": Reference("the pipeline's scores", probabilities),
            "label": Reference("the pipeline's first label", first.reshape(-1, 1)),
        },
        served,
    )


def _score(answer: list[dict[str, Any]], label: str) -> float:
    return float(next(entry["score"] for entry in answer if entry["label"] == label))


def _text_tensor(texts: list[str]) -> np.ndarray:
    return np.array([[text.encode()] for text in texts], dtype=object)


def _config(name: str, labels: int, max_batch_size: int) -> mc.ModelConfig:
    config = mc.ModelConfig(name=name, backend="python", max_batch_size=max_batch_size)
    config.input.add(name=runner.TEXT_INPUT, data_type=mc.TYPE_STRING, dims=[1])
    config.output.add(name="label", data_type=mc.TYPE_STRING, dims=[1])
    for output in ("logits", "probabilities"):
        config.output.add(
            name=output, data_type=mc.TYPE_FP32, dims=[labels], label_filename=label_filename(output)
        )
    config.instance_group.add(count=1, kind=mc.ModelInstanceGroup.KIND_CPU)
    if max_batch_size > 0:
        config.dynamic_batching.SetInParent()
    return config


def _config_to_write(model_dir: Path, config: mc.ModelConfig) -> tuple[mc.ModelConfig | None, str | None]:
    """The config to write (None: keep the operator's) and why an existing one was replaced."""
    path = model_dir / CONFIG_FILENAME
    if not path.is_file():
        return config, None
    try:
        existing = parse_config(path.read_text(encoding="utf-8"))
    except Exception:  # an unreadable config is replaced, and the warning says so
        return config, "it cannot be read"
    if _interface(existing) == _interface(config) and existing.backend == "python":
        return None, None
    return config, "its inputs or outputs differ"


def _interface(config: mc.ModelConfig) -> tuple[Any, ...]:
    return tuple((t.name, t.data_type, tuple(t.dims)) for t in [*config.input, *config.output])


def _metadata(
    pipeline: Any,
    config: mc.ModelConfig,
    folder: Path,
    model_files_dir: Path,
    described: tuple[str | None, dict[str, Any]],
    classes: dict[str, list[Any]],
) -> ModelMetadata:
    training_data_version, extra = described
    batching = config.max_batch_size > 0
    model = pipeline.model
    libraries = ("conch", "numpy", "onnx", "onnxruntime", "tokenizers", "torch", "transformers")
    return ModelMetadata(
        name=config.name,
        version=int(folder.name),
        created=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        framework={
            "name": "transformers",
            "version": distributions.version("transformers"),
            "model_class": f"{type(model).__module__}.{type(model).__qualname__}",
        },
        libraries={name: distributions.version(name) for name in libraries},
        inputs=[TensorSchema(**tensor_metadata(entry, batching)) for entry in config.input],
        outputs=[TensorSchema(**tensor_metadata(entry, batching)) for entry in config.output],
        feature_names=None,
        column_inputs={},
        classes=classes,
        training_data_version=training_data_version,
        extra=extra,
        files=version_file_checksums(folder),
        model_files=model_file_checksums(model_files_dir),
    )
