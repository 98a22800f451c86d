"""Which config tensor is which argument and which result of a PyTorch program, as Triton reads them.

A TorchScript or ``torch.export`` program takes positional arguments and returns a tensor or a tuple
of tensors: it has no tensor names of its own that a client could use. Triton's PyTorch backend
binds the config's names to positions, and so does conch, so that a Triton repository loads unchanged:

- inputs whose names are all the program's forward argument names bind by name, in any order
  (``image``, ``mask`` for ``forward(self, image, mask)``);
- otherwise names that all follow ``<name>__<index>`` (``INPUT__0``, ``INPUT__1``) bind by index;
- otherwise the config's order is the argument order.

Outputs bind by ``<name>__<index>`` (``OUTPUT__0``) when every output name follows it, else by the
config's order. This module only decides; it needs no torch.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from conch.core.errors import InvalidArgumentError

_INDEXED = re.compile(r"^.+__(\d+)$")


def input_positions(config_names: Sequence[str], argument_names: Sequence[str], model: str) -> list[int]:
    """The argument position of each config input, in config order.

    ``argument_names`` are the forward arguments a program takes (without ``self``); every one of
    them must get exactly one config input.
    """
    if set(config_names) <= set(argument_names) and len(set(config_names)) == len(config_names):
        positions = [list(argument_names).index(name) for name in config_names]
    else:
        positions = _indexed_or_ordered(config_names, "input", model)
    if sorted(positions) != list(range(len(argument_names))):
        raise InvalidArgumentError(
            f"model '{model}': the config's inputs {list(config_names)} do not bind the program's "
            f"{len(argument_names)} forward argument(s) {list(argument_names)}: name them as the "
            "arguments, or INPUT__0 .. INPUT__N by position, one per argument"
        )
    return positions


def output_positions(config_names: Sequence[str], result_count: int | None, model: str) -> list[int]:
    """The result position of each config output (``result_count``: how many the program returns,
    None when only a run tells, as for TorchScript)."""
    positions = _indexed_or_ordered(config_names, "output", model)
    if result_count is not None and any(p >= result_count for p in positions):
        raise InvalidArgumentError(
            f"model '{model}': the config's outputs {list(config_names)} ask for result positions "
            f"{positions}, but the program returns {result_count} tensor(s): number them "
            f"OUTPUT__0 .. OUTPUT__{result_count - 1}"
        )
    return positions


def default_output_name(position: int) -> str:
    """The name auto-complete gives the program's ``position``-th result."""
    return f"OUTPUT__{position}"


def _indexed_or_ordered(names: Sequence[str], role: str, model: str) -> list[int]:
    matches = [_INDEXED.match(name) for name in names]
    if not names or not all(matches):
        return list(range(len(names)))
    positions = [int(m.group(1)) for m in matches if m is not None]
    if len(set(positions)) != len(positions):
        raise InvalidArgumentError(
            f"model '{model}': two config {role}s share an index in {list(names)}; each "
            f"<name>__<index> must name a different position"
        )
    return positions
