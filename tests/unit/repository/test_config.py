"""``config.pbtxt`` parsing, the fields a text sets, DNS-safe names and the JSON form of a config."""

from __future__ import annotations

import json

import pytest
from tritonclient.grpc import model_config_pb2 as mc

from conch.core.errors import InvalidArgumentError
from conch.repository.config import config_to_json, fields_set_in_text, is_dns_safe, parse_config

SIMPLE = """
name: "simple"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [
  {
    name: "INPUT0"
    data_type: TYPE_FP32
    dims: [ 16 ]
  }
]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ -1 ] } ]
"""


def test_parse_config() -> None:
    config = parse_config(SIMPLE)

    assert config.name == "simple"
    assert config.max_batch_size == 8
    assert [(i.name, i.data_type, list(i.dims)) for i in config.input] == [("INPUT0", mc.TYPE_FP32, [16])]
    assert list(config.output[0].dims) == [-1]


def test_syntax_error_names_line_and_column() -> None:
    with pytest.raises(InvalidArgumentError, match=r"config\.pbtxt does not parse: 3:17 .*max_batch_size"):
        parse_config('name: "a"\n\nmax_batch_size: eight\n')


def test_unknown_field_is_named() -> None:
    with pytest.raises(InvalidArgumentError, match=r"2:1 .*no field named \"max_batch\""):
        parse_config('name: "a"\nmax_batch: 4\n')


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('name: "a"\nmax_batch_size: 0\n', {"name", "max_batch_size"}),
        ('name: "a"\n', {"name"}),
        ('name: "a" max_batch_size: 0', {"name", "max_batch_size"}),
        ('max_batch_size: 0 # set { on purpose\nname: "a"', {"name", "max_batch_size"}),
        (
            'parameters { key: "k" value: { string_value: "{" } }\nmax_batch_size: 0',
            {"parameters", "max_batch_size"},
        ),
        ('input [\n  {\n    name: "x"\n    dims: [ 3 ]\n  }\n]\n', {"input"}),
        ('input { name: "x" dims: 3 }\noutput < name: "y" dims: 3 >\n', {"input", "output"}),
        ("", set()),
    ],
    ids=[
        "zero-written",
        "left-out",
        "one-line",
        "brace-in-comment",
        "brace-in-string",
        "nested-keys",
        "angle-brackets",
        "empty",
    ],
)
def test_fields_set_in_text(text: str, expected: set[str]) -> None:
    assert fields_set_in_text(parse_config(text), text) == expected


@pytest.mark.parametrize("name", ["resnet50", "my-model", "a", "0x", "a" * 63])
def test_dns_safe_names(name: str) -> None:
    assert is_dns_safe(name)


@pytest.mark.parametrize("name", ["", "Model", "my_model", "my.model", "-a", "a-", "a" * 64, "a\n"])
def test_names_that_are_not_dns_safe(name: str) -> None:
    assert not is_dns_safe(name)


def test_config_to_json_writes_64_bit_integers_as_numbers() -> None:
    config = parse_config(
        SIMPLE
        + "version_policy { specific { versions: [ 1, 3 ] } }\n"
        + "dynamic_batching {\n"
        + "  max_queue_delay_microseconds: 100\n"
        + "  priority_levels: 2\n"
        + "  priority_queue_policy { key: 1 value: { default_timeout_microseconds: 5000 } }\n"
        + "}\n"
    )

    as_json = config_to_json(config)

    assert as_json["input"][0]["dims"] == [16]
    assert as_json["output"][0]["dims"] == [-1]
    assert as_json["max_batch_size"] == 8
    assert as_json["version_policy"] == {"specific": {"versions": [1, 3]}}
    batching = as_json["dynamic_batching"]
    assert batching["max_queue_delay_microseconds"] == 100
    assert batching["priority_levels"] == 2
    assert batching["priority_queue_policy"]["1"]["default_timeout_microseconds"] == 5000


def test_config_to_json_shows_maps_and_unset_fields() -> None:
    config = parse_config(
        'name: "a"\nparameters { key: "intra_op_thread_count" value: { string_value: "2" } }'
    )

    as_json = config_to_json(config)

    assert as_json["parameters"] == {"intra_op_thread_count": {"string_value": "2"}}
    assert as_json["max_batch_size"] == 0
    assert as_json["input"] == []
    assert json.loads(json.dumps(as_json)) == as_json
