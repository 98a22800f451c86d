"""Repairs to skl2onnx's text vectorizer graphs, so the served model splits text as scikit-learn does.

skl2onnx builds ``StringNormalizer -> Tokenizer -> Flatten -> TfIdfVectorizer``. Three of its choices
would change answers, so they are rewritten in place after conversion:

- ``StringNormalizer`` drops stop words from the batch of whole texts, not from words: a row that is
  just "the" vanishes and every later row moves up one. Stop words are dropped from the attribute;
  they are never in the vocabulary, so for single words nothing changes.
- With n-grams longer than one word, scikit-learn removes stop words before pairing words ("cat the
  sat" has the bigram "cat sat"). The graph gets the same step after the tokenizer: each row's stop
  words move to its end (a stable sort on position) and become padding.
- ``lowercase=False`` with stop words still lower-cased (the normalizer always did): it no longer does.
- ``analyzer="char"``: scikit-learn turns each run of two or more white-space characters into one
  space before cutting n-grams; the tokenizer keeps such a run as one token, here made a space.

Each repair is a handful of standard ONNX nodes (opset 20 for ``RegexFullMatch``).
"""

from __future__ import annotations

from typing import Any

import onnx
from onnx import TensorProto, helper

from conch.exporting.text_pipelines import RE2_CHARACTERS, SERVED_LOCALE, WHITE_SPACE

_STOPWORDS = "stopwords"


def repair_text_graph(model: onnx.ModelProto, vectorizers: dict[str, Any]) -> None:
    """Apply the repairs above to every vectorizer in ``model``'s main graph.

    ``vectorizers`` are the fitted vectorizers by the tag their normalizer carries as its locale
    (``text_pipelines.vectorizer_options``); the tag becomes :data:`SERVED_LOCALE`.
    """
    graph = model.graph
    stop_words: dict[str, list[str]] = {}  # normalizer output -> its vectorizer's stop words
    for node in list(graph.node):
        if node.op_type == "StringNormalizer":
            vectorizer = vectorizers.get(str(_attribute(node, "locale", "")))
            if vectorizer is not None:
                stop_words[node.output[0]] = _normalize_only(node, vectorizer)
    for node in list(graph.node):
        if node.op_type != "Tokenizer":
            continue
        words = stop_words.get(node.input[0], [])
        flatten = _consumer(graph, node.output[0])
        vectorizer = _consumer(graph, flatten.output[0]) if flatten is not None else None
        if words and vectorizer is not None and _attribute(vectorizer, "max_gram_length", 1) > 1:
            _drop_stop_words(graph, vectorizer, words, str(_attribute(node, "pad_value", "#")))
        if _attribute(node, "tokenexp") == RE2_CHARACTERS:
            _require_opset(model, 20)
            _one_space_per_run(graph, node)


def _normalize_only(node: onnx.NodeProto, vectorizer: Any) -> list[str]:
    """Leave the normalizer lower-casing (or not) in the served locale; return the stop words."""
    for attribute in list(node.attribute):
        if attribute.name == _STOPWORDS:
            node.attribute.remove(attribute)
        elif attribute.name == "locale":
            attribute.s = SERVED_LOCALE.encode()
        elif attribute.name == "case_change_action" and not vectorizer.lowercase:
            attribute.s = b"NONE"
    # scikit-learn removes stop words only from words: a character analyzer keeps every character.
    return sorted(vectorizer.get_stop_words() or []) if vectorizer.analyzer == "word" else []


def _one_space_per_run(graph: onnx.GraphProto, tokenizer: onnx.NodeProto) -> None:
    tokens = tokenizer.output[0]
    raw, run, space = (_name(graph, role) for role in ("raw_tokens", "white_run", "space"))
    _retarget(graph, tokens, raw)
    # The tokenizer is a com.microsoft operator that onnx's shape inference cannot see through, and
    # onnx's RegexFullMatch inference crashes on an input of unknown type: declare it.
    graph.value_info.append(helper.make_tensor_value_info(raw, TensorProto.STRING, None))
    _insert_after(
        graph,
        tokenizer,
        [
            helper.make_node("RegexFullMatch", [raw], [run], pattern=f"{WHITE_SPACE}{{2,}}"),
            _constant(space, TensorProto.STRING, [b" "]),
            helper.make_node("Where", [run, space, raw], [tokens]),
        ],
    )


def _drop_stop_words(graph: onnx.GraphProto, vectorizer: onnx.NodeProto, words: list[str], pad: str) -> None:
    tokens = vectorizer.input[0]
    roles = "words axis wide same hits any zero keep shape length start one position late key sorted"
    roles += " order moved kept pad compact"
    n = {role: _name(graph, role) for role in roles.split()}
    vectorizer.input[0] = n["compact"]
    # Each token is compared with every stop word: [rows, tokens, stop words] booleans, then any().
    nodes = [
        _constant(n["words"], TensorProto.STRING, [w.encode() for w in sorted(words)], dims=[len(words)]),
        _constant(n["axis"], TensorProto.INT64, [2], dims=[1]),
        helper.make_node("Unsqueeze", [tokens, n["axis"]], [n["wide"]]),
        helper.make_node("Equal", [n["wide"], n["words"]], [n["same"]]),
        helper.make_node("Cast", [n["same"]], [n["hits"]], to=TensorProto.INT32),
        helper.make_node("ReduceMax", [n["hits"], n["axis"]], [n["any"]], keepdims=0),
        _constant(n["zero"], TensorProto.INT32, [0]),
        helper.make_node("Equal", [n["any"], n["zero"]], [n["keep"]]),
        # Kept tokens sort by position, stop words after them: a stable compaction of each row.
        helper.make_node("Shape", [tokens], [n["shape"]], start=1, end=2),
        helper.make_node("Squeeze", [n["shape"]], [n["length"]]),
        _constant(n["start"], TensorProto.INT64, [0]),
        _constant(n["one"], TensorProto.INT64, [1]),
        helper.make_node("Range", [n["start"], n["length"], n["one"]], [n["position"]]),
        helper.make_node("Add", [n["position"], n["length"]], [n["late"]]),
        helper.make_node("Where", [n["keep"], n["position"], n["late"]], [n["key"]]),
        helper.make_node("TopK", [n["key"], n["shape"]], [n["sorted"], n["order"]], axis=1, largest=0),
        helper.make_node("GatherElements", [tokens, n["order"]], [n["moved"]], axis=1),
        helper.make_node("Less", [n["sorted"], n["length"]], [n["kept"]]),
        _constant(n["pad"], TensorProto.STRING, [pad.encode()]),
        helper.make_node("Where", [n["kept"], n["moved"], n["pad"]], [n["compact"]]),
    ]
    _insert_before(graph, vectorizer, nodes)


def _constant(name: str, kind: int, values: list[Any], dims: list[int] | None = None) -> onnx.NodeProto:
    tensor = helper.make_tensor(name + "_value", kind, dims or [], values)
    return helper.make_node("Constant", [], [name], value=tensor)


def _consumer(graph: onnx.GraphProto, output: str) -> onnx.NodeProto | None:
    return next((node for node in graph.node if output in node.input), None)


def _retarget(graph: onnx.GraphProto, old: str, new: str) -> None:
    for node in graph.node:
        for index, name in enumerate(node.output):
            if name == old:
                node.output[index] = new


def _insert_after(graph: onnx.GraphProto, anchor: onnx.NodeProto, nodes: list[onnx.NodeProto]) -> None:
    position = list(graph.node).index(anchor) + 1
    for offset, node in enumerate(nodes):
        graph.node.insert(position + offset, node)


def _insert_before(graph: onnx.GraphProto, anchor: onnx.NodeProto, nodes: list[onnx.NodeProto]) -> None:
    position = list(graph.node).index(anchor)
    for offset, node in enumerate(nodes):
        graph.node.insert(position + offset, node)


def _attribute(node: onnx.NodeProto, name: str, default: Any = None) -> Any:
    for attribute in node.attribute:
        if attribute.name == name:
            value = helper.get_attribute_value(attribute)
            return value.decode() if isinstance(value, bytes) else value
    return default


def _name(graph: onnx.GraphProto, role: str) -> str:
    """A tensor name no node of ``graph`` uses yet: the same graph always gets the same names."""
    used = {name for node in graph.node for name in node.output}
    index = 0
    while f"conch_text_{role}_{index}" in used:
        index += 1
    return f"conch_text_{role}_{index}"


def _require_opset(model: onnx.ModelProto, version: int) -> None:
    for opset in model.opset_import:
        if opset.domain in ("", "ai.onnx") and opset.version < version:
            opset.version = version
