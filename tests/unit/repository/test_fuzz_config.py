"""Hypothesis fuzzing of ``config.pbtxt`` and of the load API's JSON config override.

Any text parses into a ModelConfig or is a 400 with the parser's line and column; a config that
parses then goes through the checks a load runs (identity, batching, sequence batching, warm-up
samples, the JSON the config API answers), each of which passes or is a 4xx naming the field. Never
another exception, never an allocation the size of a config's numbers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from tritonclient.grpc import model_config_pb2 as mc

from conch.lifecycle.load_request import config_override
from conch.repository.config import config_to_json, fields_set_in_text, parse_config
from conch.repository.config_validation import check_batching, check_identity
from conch.repository.sequence_config_checks import sequence_findings
from conch.repository.warmup import WARMUP_FOLDER, warmup_file_path, warmup_samples
from tests.unit.fuzzing import FUZZ, JSON, decodes_or_refuses

number = st.integers(-3, 8) | st.sampled_from([0, 2**31 - 1, 2**40, -(2**31)])
dims = st.lists(number, max_size=4).map(lambda d: "[ " + ", ".join(map(str, d)) + " ]")
config_type = st.sampled_from([*mc.DataType.keys(), "TYPE_NOPE"])
name = st.sampled_from(["x", "INPUT0", "", "a b", "../up", "warm", "\\u0000"])
tensor = st.builds(
    lambda n, t, d, extra: f'{{ name: "{n}" data_type: {t} dims: {d} {extra} }}',
    name,
    config_type,
    dims,
    st.sampled_from(
        ["", "optional: true", "reshape: { shape: [ 4 ] }", "format: FORMAT_NCHW", "is_shape_tensor: true"]
    ),
)
warmup_data = st.sampled_from(["zero_data: true", "random_data: true", 'input_data_file: "data"']) | name.map(
    lambda n: f'input_data_file: "{n}"'
)
warmup = st.builds(
    lambda n, b, c, i, t, d, data: (
        f'{{ name: "{n}" batch_size: {b} count: {c} inputs {{ key: "{i}" '
        f"value: {{ data_type: {t} dims: {d} {data} }} }} }}"
    ),
    name,
    number,
    number,
    name,
    config_type,
    dims,
    warmup_data,
)
fragments = st.sampled_from(
    [
        'name: "model"',
        'name: "other"',
        'platform: "onnxruntime_onnx"',
        'backend: "python"',
        'platform: "ensemble"',
        "dynamic_batching { }",
        "dynamic_batching { preferred_batch_size: [ 0, 4, -1 ] max_queue_delay_microseconds: 100 }",
        "sequence_batching { max_sequence_idle_microseconds: 5 }",
        'sequence_batching { control_input [ { name: "START" control [ '
        "{ kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ] }",
        'sequence_batching { state [ { input_name: "s" output_name: "t" '
        "data_type: TYPE_FP32 dims: [ -1 ] } ] }",
        "instance_group [ { count: 2 kind: KIND_CPU } ]",
        "instance_group [ { count: -1 kind: KIND_GPU gpus: [ 7 ] } ]",
        "version_policy: { latest { num_versions: 0 } }",
        "version_policy: { specific { versions: [ -1, 3 ] } }",
        'parameters { key: "client_rate_limit" value: { string_value: "x" } }',
        'model_warmup [ { name: "big" batch_size: 8 inputs { key: "x" value: { data_type: TYPE_FP32 '
        "dims: [ 100000, 100000 ] random_data: true } } } ]",
        'model_warmup [ { name: "wide" batch_size: 2147483647 inputs { key: "x" value: { '
        "data_type: TYPE_INT64 dims: [ 4 ] zero_data: true } } } ]",
        'ensemble_scheduling { step [ { model_name: "m" model_version: -1 '
        'input_map { key: "a" value: "b" } } ] }',
    ]
)
piece = (
    fragments
    | number.map(lambda n: f"max_batch_size: {n}")
    | st.lists(tensor, max_size=2).map(lambda t: "input [ " + ", ".join(t) + " ]")
    | st.lists(tensor, max_size=2).map(lambda t: "output [ " + ", ".join(t) + " ]")
    | st.lists(warmup, min_size=1, max_size=2).map(lambda w: "model_warmup [ " + ", ".join(w) + " ]")
)


def _mutate(text: str, cut: int, junk: str) -> str:
    if cut < 0 or not text:
        return text
    cut %= len(text)
    return text[:cut] + junk + text[cut + 1 :]


configs = st.builds(
    lambda parts, cut, junk: _mutate("\n".join(parts), cut, junk),
    st.lists(piece, max_size=7),
    st.integers(-40, 400),
    st.sampled_from(["", "{", "}", '"', "[", ":", "9" * 30, "\x00", "é"]),
)


@FUZZ
@given(st.text(max_size=300))
def test_any_text_parses_or_is_a_400(text: str) -> None:
    decodes_or_refuses(lambda: parse_config(text))


def _checks(text: str, model_dir: Path) -> None:
    config = parse_config(text)
    fields_set_in_text(config, text)
    json.dumps(config_to_json(config))
    check_identity(config, "model")
    check_batching(config)
    sequence_findings(config, "model")
    warmup_samples(config, model_dir)


@FUZZ
@given(configs)
def test_a_config_parses_and_checks_or_is_a_4xx(tmp_path_factory: Any, text: str) -> None:
    model_dir = _model_dir(tmp_path_factory)
    decodes_or_refuses(lambda: _checks(text, model_dir))


@FUZZ
@given(
    st.dictionaries(
        st.sampled_from(["config", "file:1/model.onnx", "unknown", "file:../x"]), JSON, max_size=3
    )
)
def test_load_parameters_parse_or_are_a_400(parameters: dict[str, Any]) -> None:
    decodes_or_refuses(lambda: config_override(parameters))


@FUZZ
@given(st.dictionaries(st.sampled_from(list(mc.ModelConfig.DESCRIPTOR.fields_by_name)), JSON, max_size=4))
def test_a_json_config_override_parses_or_is_a_400(fields: dict[str, Any]) -> None:
    decodes_or_refuses(lambda: config_override({"config": json.dumps(fields)}))


@FUZZ
@given(st.text(max_size=40) | st.sampled_from(["data", "../warmup/data", "/etc/passwd", "a\x00b", "./data"]))
def test_a_warmup_file_name_finds_a_file_inside_warmup_or_none(tmp_path_factory: Any, name: str) -> None:
    model_dir = _model_dir(tmp_path_factory)
    path = warmup_file_path(model_dir, name)
    if path is not None:
        assert path.is_relative_to((model_dir / WARMUP_FOLDER).resolve()) and path.is_file()


_MODEL_DIRS: dict[int, Path] = {}


def _model_dir(factory: Any) -> Path:
    """One model folder with a ``warmup/data`` file, shared by every example of the session."""
    if not _MODEL_DIRS:
        model_dir = factory.mktemp("fuzz-model")
        (model_dir / "warmup").mkdir()
        (model_dir / "warmup" / "data").write_bytes(bytes(range(256)) * 4)
        _MODEL_DIRS[0] = model_dir
    return _MODEL_DIRS[0]
