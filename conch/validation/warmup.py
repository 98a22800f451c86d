"""Warm-up samples (the config's ``model_warmup``): their files, their agreement with the config's
inputs, and the data they hold, which the runtime checks use as their input.

As in Triton, ``input_data_file`` is relative to ``<model>/warmup/`` and holds one sample of the input:
the warm-up ``dims`` (without the batch dimension) times the datatype's size, little-endian; Triton sends
it ``batch_size`` times. A BYTES file holds each element as a 4-byte little-endian length followed by
that many bytes. Triton refuses a file shorter than the sample (an error here) and reads only the start
of a longer one (a warning: the dims or the datatype are probably not the ones the file was written for).
A sample with ``batch_size`` 0 is skipped by Triton (a warning).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TypeAlias

from tritonclient.grpc import model_config_pb2 as mc

from conch.core import codecs, datatypes
from conch.core.errors import ConchError
from conch.core.findings import Finding, Severity
from conch.packaging.metadata import WARMUP_FOLDER
from conch.repository.sequence_config import fed_inputs
from conch.repository.warmup import warmup_file_path

WarmupInput: TypeAlias = mc.ModelWarmup.Input


def warmup_file_findings(model_dir: Path, config: mc.ModelConfig, model: str) -> list[Finding]:
    """Each warm-up input has fixed dims, a data source, and a file of the right size where it names one."""
    found: list[Finding] = []
    for index, sample in enumerate(config.model_warmup):
        where = f"model_warmup[{index}]"
        if sample.batch_size == 0:
            found.append(
                Finding(
                    "warmup-sample-skipped",
                    Severity.WARNING,
                    model,
                    f"{where}.batch_size",
                    f"warm-up sample '{sample.name}' has batch_size 0, so Triton skips it",
                    "set batch_size: 1",
                )
            )
        for name, spec in sorted(sample.inputs.items()):
            found += _input_file_findings(model_dir, spec, model, f"{where}.inputs['{name}']", name)
    return found


def warmup_config_findings(config: mc.ModelConfig, model: str) -> list[Finding]:
    """Every warm-up input is a config input with its datatype and dims, and every config input has data.

    A warm-up sample goes straight to the instances, so for a stateful model it gives the control and
    state inputs too, as in Triton.
    """
    declared = {entry.name: entry for entry in [*config.input, *fed_inputs(config)]}
    found: list[Finding] = []
    for index, sample in enumerate(config.model_warmup):
        where = f"model_warmup[{index}].inputs"
        for name, spec in sorted(sample.inputs.items()):
            entry = declared.get(name)
            if entry is None:
                found.append(
                    Finding(
                        "warmup-input-unknown",
                        Severity.ERROR,
                        model,
                        f"{where}['{name}']",
                        f"warm-up input '{name}' is not a config input; the inputs are {sorted(declared)}",
                        "name each warm-up input after a config input",
                    )
                )
            elif (problem := _disagreement(spec, entry)) is not None:
                found.append(
                    Finding(
                        "warmup-input-mismatch",
                        Severity.ERROR,
                        model,
                        f"{where}['{name}']",
                        problem,
                        "give the warm-up input the config input's data_type and dims (without the "
                        "batch dimension when max_batch_size > 0)",
                    )
                )
        for name in sorted(declared.keys() - sample.inputs.keys()):
            found.append(
                Finding(
                    "warmup-input-mismatch",
                    Severity.ERROR,
                    model,
                    where,
                    f"warm-up sample '{sample.name}' has no data for config input '{name}'",
                    "add an entry for every config input (zero_data: true will do)",
                )
            )
    return found


def first_sample(config: mc.ModelConfig) -> mc.ModelWarmup | None:
    """The first warm-up sample Triton would send (one with a batch_size), if any."""
    return next((sample for sample in config.model_warmup if sample.batch_size > 0), None)


def _input_file_findings(
    model_dir: Path, spec: WarmupInput, model: str, field: str, name: str
) -> list[Finding]:
    if any(d < 1 for d in spec.dims):
        return [
            Finding(
                "warmup-dims-dynamic",
                Severity.ERROR,
                model,
                f"{field}.dims",
                f"warm-up input '{name}' dims {list(spec.dims)} are not all fixed sizes",
                "give every warm-up dimension a size of 1 or more: Triton refuses variable ones",
            )
        ]
    source = spec.WhichOneof("input_data_type")
    if source is None:
        return [
            Finding(
                "warmup-data-unset",
                Severity.ERROR,
                model,
                field,
                f"warm-up input '{name}' has no data source",
                "set one of zero_data: true, random_data: true or input_data_file",
            )
        ]
    if source != "input_data_file":
        return []
    return _file_findings(model_dir, spec, model, f"{field}.input_data_file")


def _file_findings(model_dir: Path, spec: WarmupInput, model: str, field: str) -> list[Finding]:
    path = warmup_file_path(model_dir, spec.input_data_file)
    if path is None:
        return [
            Finding(
                "warmup-file-missing",
                Severity.ERROR,
                model,
                field,
                f"warm-up file '{spec.input_data_file}' is not a file inside {WARMUP_FOLDER}/",
                f"put the file in <model>/{WARMUP_FOLDER}/ and name it relative to that folder",
            )
        ]
    try:
        datatype = datatypes.from_config_type(spec.data_type)
    except ConchError:
        return []  # reported against the config input by warmup_config_findings
    data = path.read_bytes()
    count = math.prod(spec.dims)
    if datatype.name == "BYTES":
        elements = _bytes_elements(data)
        if elements is None or len(elements) != count:
            held = (
                "is not a sequence of 4-byte length-prefixed elements"
                if elements is None
                else (f"holds {len(elements)} elements")
            )
            too_large = elements is not None and len(elements) > count  # the server reads the start
            return [
                Finding(
                    "warmup-file-too-large" if too_large else "warmup-file-size",
                    Severity.WARNING if too_large else Severity.ERROR,
                    model,
                    field,
                    f"warm-up file '{spec.input_data_file}' {held}; dims {list(spec.dims)} need {count}",
                    "write each string as its length (4 bytes, little-endian) followed by its bytes",
                )
            ]
        return []
    expected = count * datatype.item_size
    if len(data) == expected:
        return []
    too_short = len(data) < expected
    return [
        Finding(
            "warmup-file-size" if too_short else "warmup-file-too-large",
            Severity.ERROR if too_short else Severity.WARNING,
            model,
            field,
            f"warm-up file '{spec.input_data_file}' has {len(data)} bytes; dims {list(spec.dims)} of "
            f"{datatype.name} need {expected}",
            "write exactly one sample (dims without the batch dimension) as raw little-endian values, "
            "e.g. array.astype('<f4').tofile(path)",
        )
    ]


def _disagreement(spec: WarmupInput, entry: mc.ModelInput) -> str | None:
    if spec.data_type != entry.data_type:
        return (
            f"warm-up input '{entry.name}' has data_type {datatypes.config_type_name(spec.data_type)} but "
            f"the config input's is {datatypes.config_type_name(entry.data_type)}"
        )
    dims, wanted = list(spec.dims), list(entry.dims)
    if len(dims) != len(wanted) or any(w != -1 and d != w for d, w in zip(dims, wanted, strict=True)):
        return f"warm-up input '{entry.name}' dims {dims} do not fit the config input's dims {wanted}"
    return None


def _bytes_elements(data: bytes) -> list[bytes] | None:
    """The elements of a length-prefixed BYTES buffer, or None when the lengths do not add up."""
    try:
        return codecs.bytes_elements("", data)
    except ConchError:
        return None
