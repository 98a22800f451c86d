"""A transformer text classifier from a notebook's pipeline to a served model that takes raw text.

A tiny random BERT with a WordPiece tokenizer of BERT's class (tests/fixtures/text_classifiers.py,
nothing downloads) is exported with ``conch.export``, passes ``conch validate``'s checks, is served by
a real ``conch serve`` and answers over HTTP and gRPC as the notebook's pipeline does: texts of any
length in one batch (padded, the long one truncated), accents, capitals, emoji and the empty string.
Text that is not UTF-8 is a 400 naming the input (docs/export.md).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conch.exporting import export
from conch.exporting.errors import ExportError
from conch.packaging.metadata import read_metadata
from conch.validation import validate_model
from conch.validation.text_agreement import measure_text_versions
from tests.fixtures.text_classifiers import CORPUS, LABELS, MAX_LENGTH, review_pipeline
from tests.integration.server_process import ServerProcess

pytestmark = pytest.mark.torch  # the program this file drives

CLIENTS = {"http": httpclient, "grpc": grpcclient}
TEXTS = [
    "The film was WONDERFUL",
    "ÉCOLE Naïve café crème",
    "I loved it 😀 but the ending 😡",
    "",
    "a dull film " * 40,
    "un scénario ennuyeux",
]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    folder = tmp_path_factory.mktemp("reviews")
    pipeline = review_pipeline(folder)
    version_dir = export(pipeline, CORPUS[:4], repository=folder / "repository", name="reviews")
    return version_dir, pipeline


@pytest.fixture(scope="module")
def server(start_server: Callable[..., ServerProcess], exported: tuple[Path, Any]) -> ServerProcess:
    return start_server(exported[0].parent.parent)


def client_for(protocol: str, server: ServerProcess) -> Any:
    module = CLIENTS[protocol]
    return module.InferenceServerClient(server.http_url if protocol == "http" else server.grpc_url)


def text_input(protocol: str, values: list[bytes]) -> Any:
    array = np.array([[value] for value in values], dtype=object)
    tensor = CLIENTS[protocol].InferInput("text", list(array.shape), "BYTES")
    if protocol == "http":
        tensor.set_data_from_numpy(array, binary_data=True)
    else:
        tensor.set_data_from_numpy(array)
    return tensor


def test_the_version_folder_holds_tokenizer_encoder_and_runner(exported: tuple[Path, Any]) -> None:
    version_dir, _ = exported
    assert {"model.py", "tokenizer.json", "classifier.onnx", "text_classifier.json"} <= {
        path.name for path in version_dir.iterdir()
    }
    settings = json.loads((version_dir / "text_classifier.json").read_text())
    assert settings["max_length"] == MAX_LENGTH and settings["labels"] == list(LABELS)
    assert settings["encoder_inputs"] == ["input_ids", "attention_mask", "token_type_ids"]
    metadata = read_metadata(version_dir)
    assert metadata.classes == {"logits": list(LABELS), "probabilities": list(LABELS)}
    for folder in (version_dir, version_dir.parent):
        assert (folder / "probabilities_labels.txt").read_text().split() == list(LABELS)
    assert metadata.framework["name"] == "transformers"
    assert [(t.name, t.datatype, t.shape) for t in metadata.inputs] == [("text", "BYTES", [-1, 1])]
    assert [finding for finding in validate_model(version_dir.parent) if finding.is_error] == []


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_raw_text_answers_as_the_pipeline(
    server: ServerProcess, exported: tuple[Path, Any], protocol: str
) -> None:
    _, pipeline = exported

    result = client_for(protocol, server).infer(
        "reviews", [text_input(protocol, [t.encode() for t in TEXTS])]
    )

    answers = pipeline(TEXTS, top_k=None, truncation=True)
    expected = np.array(
        [[next(a["score"] for a in answer if a["label"] == label) for label in LABELS] for answer in answers]
    )
    np.testing.assert_allclose(result.as_numpy("probabilities"), expected, atol=1e-5)
    served_labels = [value.decode() for value in result.as_numpy("label").ravel()]
    assert served_labels == [max(answer, key=lambda a: a["score"])["label"] for answer in answers]
    assert result.as_numpy("logits").shape == (len(TEXTS), len(LABELS))


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_text_alone_answers_as_in_a_padded_batch(server: ServerProcess, protocol: str) -> None:
    client = client_for(protocol, server)
    batch = client.infer("reviews", [text_input(protocol, [t.encode() for t in TEXTS])]).as_numpy("logits")

    alone = [
        client.infer("reviews", [text_input(protocol, [t.encode()])]).as_numpy("logits")[0] for t in TEXTS
    ]

    np.testing.assert_allclose(np.array(alone), batch, atol=1e-5)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_text_that_is_not_utf8_is_a_400_naming_the_input(server: ServerProcess, protocol: str) -> None:
    client = client_for(protocol, server)
    with pytest.raises(InferenceServerException) as refused:
        client.infer("reviews", [text_input(protocol, [b"fine", b"caf\xe9 latin-1"])])

    assert "input 'text': element 1 is not valid UTF-8" in refused.value.message()
    status = refused.value.status()
    assert status in ("400", "StatusCode.INVALID_ARGUMENT"), status
    still = client.infer("reviews", [text_input(protocol, [b"still serving"])])
    assert still.as_numpy("label").shape == (1, 1)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_the_classification_extension_names_the_classes(
    server: ServerProcess, exported: tuple[Path, Any], protocol: str
) -> None:
    _, pipeline = exported
    module = CLIENTS[protocol]
    asked = module.InferRequestedOutput("probabilities", class_count=1)

    result = client_for(protocol, server).infer(
        "reviews", [text_input(protocol, [b"a dull film"])], outputs=[asked]
    )

    (top,) = result.as_numpy("probabilities").ravel()
    score, index, label = top.decode().split(":")
    (answer,) = pipeline(["a dull film"], top_k=1, truncation=True)
    answer = answer[0] if isinstance(answer, list) else answer
    assert label == answer["label"] and LABELS[int(index)] == label
    assert float(score) == pytest.approx(answer["score"], abs=1e-5)


def test_a_model_without_its_tokenizer_is_refused_with_the_pipeline_to_pass(
    exported: tuple[Path, Any], tmp_path: Path
) -> None:
    _, pipeline = exported
    with pytest.raises(ExportError, match=r"has no tokenizer with it: export the notebook's pipeline"):
        export(pipeline.model, CORPUS[:2], repository=tmp_path, name="reviews")
    assert list(tmp_path.iterdir()) == []


def test_a_sample_of_numbers_is_refused(exported: tuple[Path, Any], tmp_path: Path) -> None:
    _, pipeline = exported
    with pytest.raises(ExportError, match="a text classifier's sample is a few texts"):
        export(pipeline, np.arange(6).reshape(3, 2), repository=tmp_path, name="reviews")
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(scope="module")
def distilbert(
    start_server: Callable[..., ServerProcess], tmp_path_factory: pytest.TempPathFactory
) -> tuple[ServerProcess, Any]:
    folder = tmp_path_factory.mktemp("distilbert")
    pipeline = review_pipeline(folder, seed=1, architecture="distilbert")
    version_dir = export(pipeline, CORPUS[4:8], repository=folder / "repository", name="reviews")
    settings = json.loads((version_dir / "text_classifier.json").read_text())
    assert settings["encoder_inputs"] == ["input_ids", "attention_mask"]
    return start_server(folder / "repository"), pipeline


@pytest.mark.model_matrix
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_distilbert_answers_as_the_pipeline(distilbert: tuple[ServerProcess, Any], protocol: str) -> None:
    server, pipeline = distilbert

    result = client_for(protocol, server).infer(
        "reviews", [text_input(protocol, [t.encode() for t in TEXTS])]
    )

    answers = pipeline(TEXTS, top_k=None, truncation=True)
    served_labels = [value.decode() for value in result.as_numpy("label").ravel()]
    assert served_labels == [max(answer, key=lambda a: a["score"])["label"] for answer in answers]
    expected = [
        [next(a["score"] for a in answer if a["label"] == label) for label in LABELS] for answer in answers
    ]
    np.testing.assert_allclose(result.as_numpy("probabilities"), np.array(expected), atol=1e-5)


def test_two_versions_get_the_gates_expected_agreement(exported: tuple[Path, Any], tmp_path: Path) -> None:
    _, first = exported
    export(first, CORPUS[:4], repository=tmp_path, name="reviews")
    export(first, CORPUS[4:], repository=tmp_path, name="reviews")
    texts = [f"{a} {b}" for a in CORPUS for b in CORPUS] * 2
    flipped = copy.deepcopy(first)
    with torch.no_grad():  # logits negated: every text's first label becomes its last
        flipped.model.classifier.weight.neg_()
        flipped.model.classifier.bias.neg_()
    third = export(flipped, CORPUS[:4], repository=tmp_path, name="reviews", reference=texts)
    recorded = read_metadata(third).extra["expected_agreement"]
    assert (recorded["against_version"], recorded["rows"]) == (2, 200)

    same = measure_text_versions(tmp_path / "reviews", 2, 1, texts)
    other = measure_text_versions(tmp_path / "reviews", 3, 1, pd.Series(texts))

    assert (same.value, same.rows, same.against_version, same.self_agreement) == (1.0, 200, 1, 1.0)
    assert (other.value, other.rows, other.lower) == (0.0, 200, 0.0) and other.upper < 0.02
    with pytest.raises(ValueError, match="give at least 200"):
        measure_text_versions(tmp_path / "reviews", 2, 1, texts[:20])
