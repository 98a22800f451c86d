"""A PyTorch program read from its file: TorchScript (``model.pt``) or ``torch.export`` (``model.pt2``).

torch is an optional extra, so it is imported here, when a PyTorch model loads, and never by the rest
of the server: without it the model is UNAVAILABLE with the install hint as its reason.

What each kind of program tells about its tensors differs. A ``torch.export`` program carries every
input's and output's dtype and shape, with symbolic dimensions where it was exported dynamic, so a
config may leave them out. A TorchScript module knows its forward arguments' names only; its config
must give each tensor's name, data_type and dims.
"""

from __future__ import annotations

import importlib
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from conch.backends.pytorch.naming import default_output_name
from conch.backends.signature import ModelSignature, TensorSignature
from conch.core.errors import InvalidArgumentError, UnavailableError

INSTALL_HINT = "pip install 'conch[torch]'"
#: The suffix of ``torch.export`` programs; any other file is read as TorchScript, as Triton does.
EXPORT_SUFFIX = ".pt2"

#: How each kind of file is written, for the message of a file that does not load.
_WRITERS = {
    True: "write it with torch.export.save; TorchScript files are model.pt",
    False: "write it with torch.jit.script(m).save or torch.jit.trace(m, x).save; .pt2 is for torch.export",
}
_V2_TYPES = {
    "bool": "BOOL",
    "uint8": "UINT8",
    "int8": "INT8",
    "int16": "INT16",
    "int32": "INT32",
    "int64": "INT64",
    "float16": "FP16",
    "bfloat16": "BF16",
    "float32": "FP32",
    "float64": "FP64",
}


def import_torch() -> ModuleType:
    """torch, or UNAVAILABLE with the install hint."""
    try:
        return importlib.import_module("torch")
    except ImportError:
        raise UnavailableError(
            f"this server has no PyTorch (the torch package is not installed): {INSTALL_HINT}"
        ) from None


@dataclass
class Program:
    """A loaded program: the callable module, its forward argument names and, for ``torch.export``
    programs, its signature (None for TorchScript)."""

    module: Any
    argument_names: tuple[str, ...]
    signature: ModelSignature | None
    exported: bool


def load_program(torch: ModuleType, model_file: Path) -> Program:
    """Read ``model_file`` on the CPU; a file that is not such a program is a load error without its path."""
    exported = model_file.suffix == EXPORT_SUFFIX
    try:
        if exported:
            return _exported_program(torch, torch.export.load(str(model_file)))
        with warnings.catch_warnings():  # torch 2.13 deprecates TorchScript, which Triton repositories hold
            warnings.simplefilter("ignore", DeprecationWarning)
            module = torch.jit.load(str(model_file), map_location="cpu")
    except Exception as exc:  # the file is the user's: whatever fails to read it is a load error
        kind = "torch.export program" if exported else "TorchScript module"
        hint = _WRITERS[exported]
        reason = str(exc).replace(str(model_file.parent), "").strip().splitlines()
        raise InvalidArgumentError(
            f"{model_file.name} is not a loadable {kind} ({hint}): "
            f"{reason[0] if reason else type(exc).__name__}"
        ) from None
    module.eval()
    arguments = tuple(a.name for a in module.forward.schema.arguments[1:] if not a.has_default_value())
    return Program(module, arguments, None, exported=False)


def _exported_program(torch: ModuleType, program: Any) -> Program:
    signature = program.graph_signature
    user_inputs = list(signature.user_inputs)
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    inputs = tuple(_tensor(torch, name, placeholders[name].meta.get("val")) for name in user_inputs)
    output_node = next(n for n in program.graph.nodes if n.op == "output")
    results = output_node.args[0]
    results = results if isinstance(results, (list, tuple)) else [results]
    outputs = tuple(
        _tensor(torch, default_output_name(i), getattr(r, "meta", {}).get("val"))
        for i, r in enumerate(results)
    )
    module = program.module()
    return Program(module, tuple(user_inputs), ModelSignature(inputs, outputs), exported=True)


def _tensor(torch: ModuleType, name: str, value: Any) -> TensorSignature:
    if not isinstance(value, torch.Tensor):
        raise InvalidArgumentError(
            f"the program's tensor '{name}' is not a tensor; conch serves tensors only"
        )
    datatype = v2_datatype(value.dtype)
    shape = tuple(d if isinstance(d, int) else None for d in value.shape)
    return TensorSignature(name, datatype, shape)


def v2_datatype(dtype: Any) -> str:
    """The V2 datatype of a torch dtype (``torch.float32`` -> ``FP32``)."""
    name = str(dtype).removeprefix("torch.")
    if name not in _V2_TYPES:
        raise InvalidArgumentError(f"torch dtype {name} has no V2 datatype conch serves")
    return _V2_TYPES[name]
