"""The parameters of a repository load request, checked: a config override, and no files.

Triton's load API takes ``{"parameters": {"config": "<model config as JSON>"}}`` to replace a model's
``config.pbtxt``, and ``file:<version>/<name>`` parameters whose contents it writes into the model
repository. Writing files from an API call is how CVE-2023-31036 (path traversal out of the repository)
happened, so conch refuses every ``file:`` parameter: files reach the repository through ``conch
install`` or the operator's own deployment, never through the serving port.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2 as mc

from conch.core.errors import ErrorKind, InvalidArgumentError


class FilesRefusedError(InvalidArgumentError):
    """``file:`` load parameters: a 400 over HTTP, and over gRPC the INTERNAL status and words
    ("failed to poll from model repository") Triton answers when it cannot write a load's files,
    which its own ``simple_grpc_model_control.py`` example checks for (its TODO says INVALID_ARGUMENT
    would fit better; the example is what clients run)."""

    grpc_kind = ErrorKind.INTERNAL


#: Load parameters conch understands; anything else is refused so a typo is not silently ignored.
KNOWN_LOAD_PARAMETERS = ("config",)
KNOWN_UNLOAD_PARAMETERS = ("unload_dependents",)


def config_override(parameters: Mapping[str, Any]) -> mc.ModelConfig | None:
    """The override in ``parameters["config"]``, parsed; None when there is none."""
    files = sorted(key for key in parameters if key.startswith("file:"))
    if files:
        raise FilesRefusedError(
            f"failed to poll from model repository: load parameters {files} are refused: conch does not "
            "write files into the model repository through the API; put the files in the repository "
            "(for example with conch install), then load"
        )
    _check_known(parameters, KNOWN_LOAD_PARAMETERS, "load")
    text = parameters.get("config")
    if text is None:
        return None
    if not isinstance(text, str):
        raise InvalidArgumentError(
            "load parameter 'config' must be a string holding the model config as JSON"
        )
    config = mc.ModelConfig()
    try:
        json_format.Parse(text, config)
    except json_format.ParseError as exc:
        raise InvalidArgumentError(
            f"load parameter 'config' is not a valid model config in JSON: {exc}; give the fields of "
            'Triton\'s ModelConfig, for example {"max_batch_size": 8}'
        ) from None
    return config


def check_unload_parameters(parameters: Mapping[str, Any]) -> None:
    """``unload_dependents`` is accepted (conch has no ensembles, so there are none to unload)."""
    _check_known(parameters, KNOWN_UNLOAD_PARAMETERS, "unload")
    value = parameters.get("unload_dependents", False)
    if not isinstance(value, bool):
        raise InvalidArgumentError("unload parameter 'unload_dependents' must be true or false")


def _check_known(parameters: Mapping[str, Any], known: tuple[str, ...], action: str) -> None:
    unknown = sorted(key for key in parameters if key not in known)
    if unknown:
        raise InvalidArgumentError(f"unknown {action} parameter(s) {unknown}; {action} takes {list(known)}")
