"""``config.pbtxt`` for an exported model: the server's own auto-complete, or the operator's file kept.

There is one set of rules for what a config holds: ``conch.repository.autocomplete``, which the server
applies to a model folder without a config. Export runs the same functions on the graph and writes
the result, so an exported config says exactly what ``conch serve`` would have inferred, made visible
and editable.

When the model folder already has a config, operators may have tuned it (instances, batching delays,
warm-up). It is kept if the server would load the new graph with it, and rewritten with a
:class:`ConfigRewrittenWarning` if not (an input renamed, a datatype or dims changed).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from conch.backends.signature import ModelSignature
from conch.core.errors import ConchError
from conch.exporting.errors import ExportError
from conch.packaging.metadata import CONFIG_FILENAME
from conch.repository import autocomplete, config_validation
from conch.repository.config import fields_set_in_text, parse_config

CONFIG_HEADER = (
    "# Written by conch export from the ONNX graph, with the server's own auto-complete rules.\n"
    "# Edit freely: a later export keeps this file while the model's inputs and outputs still fit it.\n"
)


@dataclass(frozen=True)
class ConfigPlan:
    """The config the new version will be served with, and whether the export writes it.

    ``replaced_because`` says why an existing config no longer fitted (None when there was none, or
    when it is kept).
    """

    config: mc.ModelConfig
    write: bool
    replaced_because: str | None = None


def plan_config(model_dir: Path, name: str, signature: ModelSignature, max_batch_size: int) -> ConfigPlan:
    """Keep the model folder's config if it fits ``signature``, else generate one."""
    path = model_dir / CONFIG_FILENAME
    if not path.is_file():
        return ConfigPlan(generated_config(name, signature, max_batch_size), write=True)
    text = path.read_text(encoding="utf-8")
    try:
        existing = parse_config(text)
    except ConchError as exc:
        raise ExportError(f"'{path}' exists but {exc.message}; fix or remove it, then export again") from None
    try:
        autocomplete.complete_defaults(existing, name)
        config_validation.check_identity(existing, name)
        # Completed as ``conch serve`` completes it, with the server's default max_batch_size.
        autocomplete.complete_from_signature(existing, signature, fields_set_in_text(existing, text))
        config_validation.check_against_signature(existing, signature)
    except ConchError as exc:
        return ConfigPlan(generated_config(name, signature, max_batch_size), True, exc.message)
    return ConfigPlan(existing, write=False)


def generated_config(name: str, signature: ModelSignature, max_batch_size: int) -> mc.ModelConfig:
    """What ``conch serve`` infers for this graph, with ``max_batch_size`` when the graph can batch."""
    config = mc.ModelConfig(name=name)
    autocomplete.complete_defaults(config, name)
    autocomplete.complete_from_signature(config, signature, set(), max_batch_size)
    return config


def config_text(config: mc.ModelConfig) -> str:
    return CONFIG_HEADER + text_format.MessageToString(config)
