"""``config.pbtxt``: Triton's ``ModelConfig`` protobuf, parsed with ``text_format`` and shown as JSON.

There is no hand-written schema: the message type comes from ``tritonclient.grpc.model_config_pb2``.
"""

from __future__ import annotations

import re
from typing import Any

from google.protobuf import descriptor, json_format, text_format
from tritonclient.grpc import model_config_pb2 as mc

from conch.core import datatypes
from conch.core.errors import InvalidArgumentError

ModelConfig = mc.ModelConfig

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_INT64_TYPES = {
    descriptor.FieldDescriptor.TYPE_INT64,
    descriptor.FieldDescriptor.TYPE_UINT64,
    descriptor.FieldDescriptor.TYPE_SINT64,
    descriptor.FieldDescriptor.TYPE_FIXED64,
    descriptor.FieldDescriptor.TYPE_SFIXED64,
}


def parse_config(text: str) -> mc.ModelConfig:
    """Parse ``config.pbtxt`` text; a syntax or unknown-field error becomes a 400 with line and column."""
    config = mc.ModelConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as exc:
        raise InvalidArgumentError(f"config.pbtxt does not parse: {exc}") from None
    return config


def fields_set_in_text(config: mc.ModelConfig, text: str) -> set[str]:
    """Top-level field names written in ``text`` (which parsed into ``config``), to tell "left out"
    from "set to 0" in proto3."""
    return {field.name for field, _ in config.ListFields()} | _scalar_keys(text)


def _scalar_keys(text: str) -> set[str]:
    # proto3 scalars set to their default value leave no trace in ListFields(), so read the keys.
    # protobuf's own tokenizer keeps braces inside strings and comments from counting as nesting.
    tokenizer = text_format.Tokenizer(text.splitlines())
    depth = 0
    previous = ""
    keys: set[str] = set()
    while not tokenizer.AtEnd():
        token = tokenizer.token
        if token in ("{", "[", "<"):
            depth += 1
        elif token in ("}", "]", ">"):
            depth -= 1
        elif token == ":" and depth == 0:
            keys.add(previous)
        previous = token
        tokenizer.NextToken()
    return keys


def tensor_metadata(entry: mc.ModelInput | mc.ModelOutput, batching: bool) -> dict[str, Any]:
    """A config input or output as callers see it (V2 metadata): name, datatype and the full shape,
    -1 first for the batch dimension when the model batches."""
    return {
        "name": entry.name,
        "datatype": datatypes.from_config_type(entry.data_type).name,
        "shape": ([-1] if batching else []) + list(entry.dims),
    }


def is_dns_safe(name: str) -> bool:
    """Whether ``name`` can be a Kubernetes/DNS label (lower case, digits, dashes, at most 63)."""
    return bool(_DNS_LABEL.fullmatch(name))


def config_to_json(config: mc.ModelConfig) -> dict[str, Any]:
    """The config as Triton's JSON: proto field names, every field shown, 64-bit integers as numbers."""
    as_dict = json_format.MessageToDict(
        config, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    return _int64_as_numbers(as_dict, config.DESCRIPTOR)


def _int64_as_numbers(value: Any, message: descriptor.Descriptor) -> Any:
    for field in message.fields:
        if field.name not in value:
            continue
        value[field.name] = _convert_field(value[field.name], field)
    return value


def _convert_field(value: Any, field: descriptor.FieldDescriptor) -> Any:
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        value_field = field.message_type.fields_by_name["value"]
        return {k: _convert_scalar_or_message(v, value_field) for k, v in value.items()}
    if field.is_repeated:
        return [_convert_scalar_or_message(v, field) for v in value]
    return _convert_scalar_or_message(value, field)


def _convert_scalar_or_message(value: Any, field: descriptor.FieldDescriptor) -> Any:
    if field.message_type is not None:
        return _int64_as_numbers(value, field.message_type)
    if field.type in _INT64_TYPES and isinstance(value, str):
        return int(value)
    return value
