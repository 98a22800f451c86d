"""Text pipelines as a notebook writes them, exported and run with ONNX Runtime against their own answers.

Every export here already passed its check against ``predict`` and ``predict_proba`` on the sample;
the tests then run the written graph on rows it never saw (accents, capitals, emoji, empty strings,
stop words, runs of white space) and compare again, and look at what the graph asks of its host.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pandas as pd
import pytest
from sklearn.compose import make_column_transformer
from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.naive_bayes import MultinomialNB
from sklearn.pipeline import make_pipeline

from conch.exporting import ExportError, export
from conch.exporting.text_pipelines import SERVED_LOCALE

TEXTS = [
    "The cat sat on the mat",
    "ÉCOLE des chats, café noir",
    "dog barks loud at the mailman",
    "a Dog and a CAT",
    "🙂 happy dog 🙂",
    "école café",
    "birds fly south",
    "naïve  Straße\n\nzoo",
    "cat the sat",
    "ĞÜŞ ISTANBUL cats",
]
LABELS = ["pets", "school", "pets", "pets", "mood", "school", "birds", "city", "pets", "city"]
#: Rows the export never saw: whole texts that are stop words, empty strings, capitals, emoji alone.
UNSEEN = ["the", "", "CAT SAT", "Café ÉCOLE", "🙂", "and the dog", "  dog\tcat  ", "zoo zoo zoo", "Ü"]


def run(version_dir: Path, name: str, texts: list[str]) -> list[np.ndarray]:
    session = ort.InferenceSession(str(version_dir / "model.onnx"))
    return session.run(None, {name: np.array(texts, dtype=object).reshape(-1, 1)})


def assert_answers_like(model: Any, version_dir: Path, name: str, texts: list[str]) -> None:
    outputs = run(version_dir, name, texts)
    np.testing.assert_array_equal(outputs[0].ravel(), model.predict(texts))
    if hasattr(model, "predict_proba"):
        np.testing.assert_allclose(outputs[1], model.predict_proba(texts), atol=1e-5, rtol=1e-4)


VECTORIZERS = {
    "tfidf words": lambda: TfidfVectorizer(),
    "tfidf bigrams with English stop words": lambda: TfidfVectorizer(
        ngram_range=(1, 2), stop_words="english"
    ),
    "count char n-grams": lambda: CountVectorizer(analyzer="char", ngram_range=(1, 3)),
    "count cased trigrams with a stop list": lambda: CountVectorizer(
        lowercase=False, stop_words=["the", "a"], ngram_range=(1, 3)
    ),
}


@pytest.mark.parametrize("kind", list(VECTORIZERS))
def test_a_text_pipeline_fitted_on_a_list_answers_as_the_notebook(tmp_path: Path, kind: str) -> None:
    model = make_pipeline(VECTORIZERS[kind](), LogisticRegression(max_iter=500)).fit(TEXTS * 2, LABELS * 2)

    version_dir = export(model, TEXTS, repository=tmp_path, name="reviews")

    assert_answers_like(model, version_dir, "text", UNSEEN + TEXTS)
    metadata = json.loads((version_dir / "metadata.json").read_text())
    assert metadata["inputs"] == [{"name": "text", "datatype": "BYTES", "shape": [-1, 1]}]


@pytest.mark.parametrize(
    "sample, name",
    [
        (pd.Series(TEXTS, name="review"), "review"),
        (pd.DataFrame({"customer review": TEXTS}), "customer_review"),
        (np.array(TEXTS, dtype=object).reshape(-1, 1), "text"),
        (pd.Series(TEXTS), "text"),
    ],
    ids=["series", "one-column frame", "2-D array", "unnamed series"],
)
def test_the_input_is_named_after_the_column_or_text(tmp_path: Path, sample: Any, name: str) -> None:
    model = make_pipeline(TfidfVectorizer(), MultinomialNB()).fit(pd.Series(TEXTS * 2), LABELS * 2)

    version_dir = export(model, sample, repository=tmp_path, name="reviews")

    assert_answers_like(model, version_dir, name, UNSEEN)


def test_a_text_regressor_exports_too(tmp_path: Path) -> None:
    model = make_pipeline(TfidfVectorizer(ngram_range=(1, 2)), Ridge()).fit(TEXTS, np.arange(len(TEXTS)))

    version_dir = export(model, TEXTS, repository=tmp_path, name="scores")

    (values,) = run(version_dir, "text", UNSEEN)
    np.testing.assert_allclose(values.ravel(), model.predict(UNSEEN), atol=1e-4, rtol=1e-4)


def test_the_graph_needs_no_locale_but_c_utf8(tmp_path: Path) -> None:
    model = make_pipeline(TfidfVectorizer(stop_words="english"), LogisticRegression()).fit(TEXTS, LABELS)

    version_dir = export(model, TEXTS, repository=tmp_path, name="reviews")

    graph = onnx.load(str(version_dir / "model.onnx")).graph
    normalizers = [node for node in graph.node if node.op_type == "StringNormalizer"]
    assert normalizers, "the pipeline lower-cases, so the graph has a normalizer"
    for node in normalizers:
        attributes = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        assert attributes["locale"] == SERVED_LOCALE.encode()
        assert "stopwords" not in attributes  # it would drop whole rows that are a stop word


@pytest.mark.parametrize(
    "vectorizer, words",
    [
        (CountVectorizer(analyzer="char_wb"), 'analyzer="char"'),
        (TfidfVectorizer(strip_accents="unicode"), "strip accents"),
        (TfidfVectorizer(tokenizer=str.split, token_pattern=None), "token_pattern"),
    ],
    ids=["char_wb", "strip_accents", "python tokenizer"],
)
def test_settings_no_graph_can_hold_are_refused_with_the_fix(
    tmp_path: Path, vectorizer: Any, words: str
) -> None:
    model = make_pipeline(vectorizer, LogisticRegression()).fit(TEXTS, LABELS)

    with pytest.raises(ExportError, match=words):
        export(model, TEXTS, repository=tmp_path, name="reviews")
    assert not (tmp_path / "reviews").exists()


@pytest.mark.parametrize(
    "sample, words",
    [
        (pd.DataFrame({"a": TEXTS, "b": TEXTS}), "one column of text"),
        ([*TEXTS[:3], None], "fillna"),
        ([], "at least one row"),
    ],
    ids=["two columns", "a missing text", "no rows"],
)
def test_a_sample_that_is_not_one_column_of_text_is_refused(tmp_path: Path, sample: Any, words: str) -> None:
    model = make_pipeline(TfidfVectorizer(), LogisticRegression()).fit(TEXTS, LABELS)

    with pytest.raises(ExportError, match=words):
        export(model, sample, repository=tmp_path, name="reviews")


@pytest.mark.parametrize("as_series", [False, True], ids=["list", "series"])
def test_the_expected_agreement_takes_text_as_the_pipeline_was_fitted(
    tmp_path: Path, as_series: bool
) -> None:
    rng = np.random.default_rng(1)
    reference = [" ".join(rng.choice(["good", "bad", "École", "🙂", "slow"], 3)) for _ in range(240)]
    labels = ["good" in text for text in reference]
    first = make_pipeline(TfidfVectorizer(), LogisticRegression()).fit(reference, labels)
    second = make_pipeline(TfidfVectorizer(ngram_range=(1, 2)), LogisticRegression()).fit(reference, labels)
    export(first, reference[:20], repository=tmp_path, name="reviews")

    rows = pd.Series(reference, name="text") if as_series else reference
    version_dir = export(second, reference[:20], repository=tmp_path, name="reviews", reference=rows)

    expected = json.loads((version_dir / "metadata.json").read_text())["extra"]["expected_agreement"]
    agreeing = np.mean(first.predict(reference) == second.predict(reference))
    assert expected["value"] == pytest.approx(agreeing)


def test_vectorizers_inside_a_column_transformer_export_the_same_graph_every_time(tmp_path: Path) -> None:
    frame = pd.DataFrame({"title": TEXTS * 2, "body": [t.upper() + "  and the end" for t in TEXTS * 2]})
    columns = make_column_transformer(
        (TfidfVectorizer(ngram_range=(1, 2), stop_words="english"), "title"),
        (CountVectorizer(analyzer="char", ngram_range=(1, 3)), "body"),
        (TfidfVectorizer(ngram_range=(1, 3), stop_words=["the", "and"]), "body"),
    )
    model = make_pipeline(columns, LogisticRegression(max_iter=500)).fit(frame, LABELS * 2)

    first = export(model, frame, repository=tmp_path, name="tickets")
    second = export(model, frame, repository=tmp_path, name="tickets")

    assert (first / "model.onnx").read_bytes() == (second / "model.onnx").read_bytes()
    unseen = pd.DataFrame({"title": UNSEEN, "body": UNSEEN[::-1]})
    feeds = {c: unseen[[c]].to_numpy(dtype=object) for c in unseen.columns}
    _, probabilities = ort.InferenceSession(str(first / "model.onnx")).run(None, feeds)
    np.testing.assert_allclose(probabilities, model.predict_proba(unseen), atol=1e-5, rtol=1e-4)


def test_an_onnx_text_model_needing_a_missing_locale_is_refused_with_the_cause(tmp_path: Path) -> None:
    model = make_pipeline(TfidfVectorizer(), LogisticRegression()).fit(TEXTS, LABELS)
    graph = onnx.load(str(export(model, TEXTS, repository=tmp_path, name="reviews") / "model.onnx"))
    for node in graph.graph.node:
        for attribute in node.attribute:
            if attribute.name == "locale":
                attribute.s = b"zz_ZZ.UTF-8"  # what another tool's export may ask for

    with pytest.raises(ExportError, match=r"locale 'zz_ZZ.UTF-8'.*C.UTF-8"):
        export(graph, np.array(TEXTS, dtype=object).reshape(-1, 1), repository=tmp_path, name="imported")
