"""A model's quantized twin: an int8 version made from an fp32 one, and which of the two a server serves.

``conch optimize --int8`` writes a new version beside the fp32 one it was made from and records the
pair in ``config.pbtxt``'s ``parameters``, where ``GET /v2/models/{m}/config`` shows it to clients:

- ``quantized_twin``: the int8 version's number;
- ``quantized_twin_of``: the fp32 version it was made from;
- ``prefer_quantized``: which of the two this server serves, ``always``, ``never`` or ``no_gpu`` (the
  default: the int8 twin where ONNX Runtime has no CUDA provider, the fp32 version where it has one).

The two are one model version in two precisions, so they share one slot of the version policy: when
the policy picks one of them, the preferred one is loaded in its place, and an edge device holds only
the int8 file in memory. When the policy picks both (``all``, or ``specific`` naming both), both load,
requests that name a version get it, and requests that name none go to the preferred one.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

from conch.core.errors import InvalidArgumentError

TWIN_PARAMETER = "quantized_twin"
SOURCE_PARAMETER = "quantized_twin_of"
PREFERENCE_PARAMETER = "prefer_quantized"
ALWAYS, NEVER, NO_GPU = "always", "never", "no_gpu"
PREFERENCES = (ALWAYS, NEVER, NO_GPU)
DEFAULT_PREFERENCE = NO_GPU


@dataclass(frozen=True)
class QuantizedTwin:
    """The pair of versions, and whether this server prefers the quantized one."""

    quantized: int
    source: int
    prefers_quantized: bool

    @property
    def preferred(self) -> int:
        return self.quantized if self.prefers_quantized else self.source

    @property
    def other(self) -> int:
        return self.source if self.prefers_quantized else self.quantized

    def served_versions(self, selected: Iterable[int], available: Collection[int]) -> list[int]:
        """The versions to load, from those the version policy ``selected`` out of ``available``.

        A policy that picked one of the pair gets the preferred one instead (or keeps the one it
        picked when the preferred folder is missing); one that picked both or neither is left alone.
        """
        chosen = set(selected)
        pair = {self.quantized, self.source}
        if len(chosen & pair) != 1:
            return sorted(chosen)
        chosen -= pair
        chosen.add(self.preferred if self.preferred in available else self.other)
        return sorted(chosen)

    def answering(self, newest: int, ready: Collection[int]) -> int:
        """The version a request that names none goes to, when ``newest`` is the newest ready one."""
        if newest in (self.quantized, self.source) and self.preferred in ready:
            return self.preferred
        return newest


def twin_from_config(config: mc.ModelConfig, gpu: bool) -> QuantizedTwin | None:
    """The config's twin (None when it names none); ``gpu``: this server can run ONNX on a GPU.

    A twin half-named, a number that is not a version or an unknown preference is a 400 naming the
    parameter and what it may hold: serving the wrong precision silently would be worse.
    """
    parameters = config.parameters
    if TWIN_PARAMETER not in parameters and SOURCE_PARAMETER not in parameters:
        return None
    quantized = _version_parameter(parameters, TWIN_PARAMETER)
    source = _version_parameter(parameters, SOURCE_PARAMETER)
    if quantized == source:
        raise InvalidArgumentError(
            f"parameters '{TWIN_PARAMETER}' and '{SOURCE_PARAMETER}' both name version {quantized}; the "
            "quantized twin is another version folder than the one it was made from"
        )
    preference = (
        parameters[PREFERENCE_PARAMETER].string_value.strip().lower()
        if PREFERENCE_PARAMETER in parameters
        else DEFAULT_PREFERENCE
    )
    if preference not in PREFERENCES:
        raise InvalidArgumentError(
            f"parameters '{PREFERENCE_PARAMETER}' must be one of {', '.join(PREFERENCES)}, got "
            f"'{parameters[PREFERENCE_PARAMETER].string_value}'"
        )
    prefers = preference == ALWAYS or (preference == NO_GPU and not gpu)
    return QuantizedTwin(quantized, source, prefers)


def _version_parameter(parameters: Any, key: str) -> int:
    other = SOURCE_PARAMETER if key == TWIN_PARAMETER else TWIN_PARAMETER
    if key not in parameters:
        raise InvalidArgumentError(
            f"parameters '{other}' names a quantized twin but '{key}' is missing; set both (conch "
            "optimize writes them), or remove both"
        )
    text = parameters[key].string_value.strip()
    if not text.isdigit() or int(text) < 1:
        raise InvalidArgumentError(
            f"parameters '{key}' must be a version number such as \"2\", got '{parameters[key].string_value}'"
        )
    return int(text)
