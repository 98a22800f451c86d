"""What a model file declares about its inputs and outputs, before any config is applied."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TensorSignature:
    """One graph input or output: V2 datatype and shape, ``None`` for a dynamic dimension."""

    name: str
    datatype: str
    shape: tuple[int | None, ...]


@dataclass(frozen=True)
class ModelSignature:
    """The inputs and outputs of a model graph, in graph order."""

    inputs: tuple[TensorSignature, ...]
    outputs: tuple[TensorSignature, ...]
