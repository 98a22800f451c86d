"""Text pipelines as the notebook wrote them: ``make_pipeline(TfidfVectorizer(), estimator)`` on raw text.

Such a pipeline is fitted on a list, a Series or one column of strings, so it has no columns to map
onto graph inputs: it becomes one BYTES input of shape ``[-1, 1]``, named after the sample's column
(a Series' or one-column frame's name) or ``text``. The original is asked about the sample as a list
of strings, which is what it was fitted on (a frame would make it iterate over the column names).

skl2onnx's vectorizer graphs need three choices made for them, which :func:`vectorizer_options` makes
for every ``CountVectorizer``/``TfidfVectorizer`` of a model, inside a ColumnTransformer too:

- the locale of the ``StringNormalizer`` that lower-cases: ``C.UTF-8``, present on every slim Debian
  or Ubuntu image, instead of ONNX Runtime's default ``en_US.UTF-8``, which such images lack (the
  model then fails to load). It lower-cases accented and non-Latin capitals ("ÉCOLE") as Python does.
- the word pattern: scikit-learn's default ``\\b\\w\\w+\\b`` is Unicode-aware, while skl2onnx's stand-in
  ``[a-zA-Z0-9_]+`` cuts "école" into "cole"; ``[\\p{L}\\p{N}_]{2,}`` is the same rule in RE2's terms.
- the character pattern for ``analyzer="char"``: any character, line ends included
  (``conch.exporting.text_graph`` then turns runs of white space into one space, as scikit-learn does).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from conch.exporting.column_names import tensor_names
from conch.exporting.errors import ExportError
from conch.exporting.samples import is_data_frame
from conch.exporting.sklearn_parts import first_step

#: The one locale the served model may need: slim Debian and Ubuntu images have it, and no other.
SERVED_LOCALE = "C.UTF-8"
#: Input name of a text pipeline fitted on a list (no column name to take).
TEXT_INPUT = "text"
#: scikit-learn's default token pattern, and the same words in RE2's syntax (which ONNX Runtime uses).
SKLEARN_WORDS = r"(?u)\b\w\w+\b"
RE2_WORDS = r"[\p{L}\p{N}_]{2,}"
#: White space as Python's ``\s`` sees it, in RE2's syntax; a run of two or more is one token.
WHITE_SPACE = r"[\s\v\p{Z}\x{1c}-\x{1f}\x{85}]"
RE2_CHARACTERS = rf"(?s){WHITE_SPACE}{WHITE_SPACE}+|."
#: Stands in the normalizer's locale until the graph is repaired (see :func:`vectorizer_options`).
VECTORIZER_TAG = "conch-vectorizer-"


def is_text_pipeline(model: Any) -> bool:
    """Whether ``model`` takes raw text: a vectorizer is its first step (in nested pipelines too)."""
    from sklearn.feature_extraction.text import CountVectorizer

    return isinstance(first_step(model), CountVectorizer)


def text_sample(sample: Any) -> tuple[str, np.ndarray, list[str]]:
    """The input's name, its ``[rows, 1]`` text array, and the sample as the pipeline was fitted on.

    ``sample`` is a list or tuple of strings, a 1-D array, a pandas Series or a one-column frame.
    """
    name = TEXT_INPUT
    if isinstance(sample, np.ndarray) and sample.ndim == 2 and sample.shape[1] == 1:
        sample = sample[:, 0]
    if is_data_frame(sample):
        if sample.shape[1] != 1:
            raise ExportError(
                f"a text pipeline takes one column of text, but the sample frame has {sample.shape[1]} "
                f"columns {[str(c) for c in sample.columns]}; pass the text column alone, e.g. "
                "frame[['text']], or put the vectorizer in a ColumnTransformer"
            )
        name, sample = str(sample.columns[0]), sample.iloc[:, 0]
    elif type(sample).__name__ == "Series" and sample.name is not None:
        name = str(sample.name)
    values = sample.tolist() if hasattr(sample, "tolist") else list(sample) if _is_sequence(sample) else None
    if values is None or any(isinstance(v, list | tuple) for v in values):
        raise ExportError(
            "a text pipeline's sample is its text: a list of strings, a Series or a one-column frame; "
            f"got {type(sample).__name__}"
        )
    if not values:
        raise ExportError("the sample has no text: export needs at least one row")
    not_text = [v for v in values if not isinstance(v, str)]
    if not_text:
        raise ExportError(
            f"the text pipeline's sample holds {len(not_text)} value(s) that are not strings, such as "
            f"{not_text[0]!r}; the vectorizer cannot read them either: fill them first, e.g. "
            "texts.fillna('')"
        )
    texts = np.empty((len(values), 1), dtype=object)
    texts[:, 0] = values
    return tensor_names([name])[name], texts, values


def vectorizer_options(parts: list[Any]) -> tuple[dict[int, dict[str, Any]], dict[str, Any]]:
    """skl2onnx options for each fitted vectorizer in ``parts``, and the vectorizers by their tag.

    The ``locale`` option first carries a tag naming the vectorizer, so that ``text_graph`` can find
    which normalizer belongs to which vectorizer (skl2onnx records no link) before it sets the real
    locale, :data:`SERVED_LOCALE`. Unconvertible settings are refused.
    """
    from sklearn.feature_extraction.text import CountVectorizer

    options: dict[int, dict[str, Any]] = {}
    tags: dict[str, Any] = {}
    for part in parts:
        if not isinstance(part, CountVectorizer):
            continue
        _check_convertible(part)
        tag = f"{VECTORIZER_TAG}{len(tags)}"
        tags[tag] = part
        chosen: dict[str, Any] = {"locale": tag}
        if part.analyzer == "char":
            chosen["tokenexp"] = RE2_CHARACTERS
        elif part.token_pattern == SKLEARN_WORDS:
            chosen["tokenexp"] = RE2_WORDS
        options[id(part)] = chosen
    return options, tags


def stop_words_shown(part: Any, apply: bool) -> bool:
    """A patch (``sklearn_parts.Patch``): a vectorizer's stop words as the list skl2onnx reads.

    skl2onnx reads ``stop_words`` as a list (``"english"`` would be seven letters) and adds the
    terms cut by ``max_df``, which are not stop words; without a normalizer node, ``text_graph``
    could not remove them either.
    """
    from sklearn.feature_extraction.text import CountVectorizer

    if not isinstance(part, CountVectorizer) or not part.get_stop_words():
        return False
    if apply:
        part.stop_words = sorted(part.get_stop_words())
        part.stop_words_ = set()
    return True


def _check_convertible(vectorizer: Any) -> None:
    kind = type(vectorizer).__name__
    if callable(vectorizer.analyzer) or vectorizer.tokenizer is not None or vectorizer.preprocessor:
        raise ExportError(
            f"{kind} has a Python function as analyzer, tokenizer or preprocessor, which no ONNX graph "
            "can hold: express it with token_pattern, lowercase and stop_words, or export a torch model"
        )
    if vectorizer.analyzer == "char_wb":
        raise ExportError(f'{kind}(analyzer="char_wb") has no ONNX form: fit it with analyzer="char" instead')
    if vectorizer.strip_accents is not None:
        raise ExportError(
            f"{kind}(strip_accents={vectorizer.strip_accents!r}) has no ONNX form: strip accents from "
            "the text before it reaches the model, or fit without strip_accents"
        )


def _is_sequence(sample: Any) -> bool:
    return isinstance(sample, list | tuple) or (isinstance(sample, np.ndarray) and sample.ndim == 1)
