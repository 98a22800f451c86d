"""Every check of a model folder or a repository, in the order the server loads a model.

Model level: ``config.pbtxt`` parses, then identity (name, DNS-safe name, platform, ``max_batch_size``),
warm-up files and version folders. A platform conch cannot run or a negative ``max_batch_size`` stops
there: the versions' checks would only repeat it. An ensemble stops there too, after the checks of its
own config (:mod:`conch.validation.ensemble_checks`): it has no model file. So does a Python-backend
model, after its model files and batching section (:mod:`conch.validation.python_model_checks`): its
code is not run here.

Each numeric version folder, served by the version policy or not: the model file is present, loads as
ONNX, passes ``onnx.checker`` and holds no training-mode leftovers; its ``metadata.json``; an ONNX
Runtime session opens; the config is completed from the graph as the server does; the completed config
agrees with the graph (names, datatypes, dims, ``reshape``), ``dynamic_batching`` is sane and the warm-up
sample fits the inputs; then, when none of those is an error, the runtime checks run.

A check whose input failed is skipped rather than reported twice, and a finding that several versions
share (a config that disagrees with every version's graph) is reported once, naming the versions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from conch.backends.kinds import ENSEMBLE_PLATFORM, BackendKind, backend_kind
from conch.backends.onnxruntime import OnnxRuntimeInstance, open_session, read_signature
from conch.core import datatypes
from conch.core.errors import ConchError
from conch.core.findings import Finding, Severity
from conch.packaging.metadata import CONFIG_FILENAME
from conch.repository.autocomplete import complete_from_signature
from conch.repository.config_validation import (
    batching_findings,
    identity_findings,
    reshape_findings,
    signature_findings,
)
from conch.validation.contract_checks import contract_findings
from conch.validation.ensemble_checks import ensemble_findings
from conch.validation.graph import checker_findings, load_graph, training_mode_findings
from conch.validation.inputs import runtime_inputs
from conch.validation.load_hints import not_loadable_hint
from conch.validation.metadata_checks import metadata_findings
from conch.validation.model_folder import (
    ModelFolder,
    NotAModelOrRepositoryError,
    model_folders,
    read_model_folder,
    version_numbers,
)
from conch.validation.python_model_checks import python_model_findings
from conch.validation.runtime import BATCH_ROWS, runtime_findings
from conch.validation.warmup import warmup_config_findings, warmup_file_findings

Progress = Callable[[str], None]
_STOPS_VERSION_CHECKS = {"platform-unsupported", "max-batch-size-negative"}


def validate_path(path: Path, progress: Progress | None = None) -> list[Finding]:
    """Validate a model folder, or every model of a repository (how they are told apart: ``model_folder``)."""
    return [finding for folder in model_folders(path) for finding in validate_model(folder, progress)]


def validate_model(model_dir: Path, progress: Progress | None = None) -> list[Finding]:
    """Every finding for one model folder; ``progress`` hears each slow step ("digits-mlp 1: determinism")."""
    if not model_dir.is_dir():
        raise NotAModelOrRepositoryError(f"'{model_dir}' is not a folder")
    folder, found = read_model_folder(model_dir)
    if folder is None:
        return found
    identity = identity_findings(folder.config, folder.name)
    found += identity
    warmup_files = warmup_file_findings(model_dir, folder.config, folder.name)
    found += warmup_files
    if any(finding.code in _STOPS_VERSION_CHECKS for finding in identity):
        return found
    if folder.config.platform == ENSEMBLE_PLATFORM:
        # No model file to check: its version folders stay empty, and its steps are other models.
        return found + version_numbers(folder)[1] + ensemble_findings(folder.config, folder.name)
    if backend_kind(folder.config) is BackendKind.PYTHON:
        contracts = [f for n in version_numbers(folder)[0] for f in _contract(folder, n, folder.config)]
        return found + python_model_findings(folder) + contracts
    if backend_kind(folder.config) is BackendKind.PYTORCH:
        # Checking a PyTorch program needs torch, an optional extra: the server's load checks it.
        return found + version_numbers(folder)[1]
    numbers, version_found = version_numbers(folder)
    found += version_found
    warmup_usable = not any(finding.is_error for finding in warmup_files)
    per_version: dict[int, list[Finding]] = {}
    completed = None
    for number in numbers:
        per_version[number], version_config = _check_version(
            folder, number, warmup_usable, progress or _silent
        )
        completed = version_config or completed
    if not folder.has_config_file:
        found.insert(0, _autocompleted(folder.name, completed))
    return found + _merge_versions(per_version)


def _check_version(
    folder: ModelFolder, number: int, warmup_usable: bool, progress: Progress
) -> tuple[list[Finding], mc.ModelConfig | None]:
    """One version's findings, and its config as the server completes it (None if no session opens)."""
    name, filename = folder.name, folder.config.default_model_filename
    model_file = folder.path / str(number) / filename
    field = f"{number}/{filename}"

    def step(what: str) -> None:
        progress(f"{name} {number}: {what}")

    if not model_file.is_file():
        return [_model_file_missing(name, field, filename)], None
    step("graph")
    proto, found = load_graph(model_file, name, field)
    found += metadata_findings(folder.path, number, name)
    if proto is None:
        return found, None
    found += checker_findings(model_file, name, field) + training_mode_findings(proto, name, field)
    try:
        session = open_session(model_file, folder.config)
        signature = read_signature(session)
    except ConchError as exc:
        return [*found, _not_loadable(name, field, exc.message)], None
    config = mc.ModelConfig()
    config.CopyFrom(folder.config)
    complete_from_signature(config, signature, folder.fields_set)
    config_found = (
        signature_findings(config, signature, name)
        + reshape_findings(config, name)
        + batching_findings(config, name)
        + warmup_config_findings(config, name)
    )
    found += config_found + _contract(folder, number, config)
    if warmup_usable and not any(finding.is_error for finding in config_found):
        instance = OnnxRuntimeInstance(session, config)
        inputs = runtime_inputs(folder.path, config, min(BATCH_ROWS, max(config.max_batch_size, 1)))
        found += runtime_findings(instance, config, inputs, name, field, step)
    return found, config


def _contract(folder: ModelFolder, number: int, config: mc.ModelConfig) -> list[Finding]:
    return contract_findings(folder.path / str(number), config, folder.name)


def _merge_versions(per_version: dict[int, list[Finding]]) -> list[Finding]:
    """Each finding once, its message starting with the version(s) it was found in."""
    versions_of: dict[Finding, list[int]] = {}
    for number, findings in per_version.items():
        for finding in findings:
            versions_of.setdefault(finding, []).append(number)
    return [
        replace(finding, message=f"{_versions(numbers)}: {finding.message}")
        for finding, numbers in versions_of.items()
    ]


def _versions(numbers: list[int]) -> str:
    if len(numbers) == 1:
        return f"version {numbers[0]}"
    return f"versions {', '.join(map(str, numbers))}"


def _autocompleted(model: str, config: mc.ModelConfig | None) -> Finding:
    if config is None:
        message = f"no {CONFIG_FILENAME}, and no version's graph could be read to complete one"
    else:
        described = {
            role: ", ".join(
                f"'{e.name}' {datatypes.from_config_type(e.data_type).name} {list(e.dims)}" for e in entries
            )
            for role, entries in (("inputs", config.input), ("outputs", config.output))
        }
        message = (
            f"no {CONFIG_FILENAME}: validated the config the server completes from the graph "
            f"(max_batch_size {config.max_batch_size}; inputs {described['inputs']}; "
            f"outputs {described['outputs']})"
        )
    return Finding(
        "config-autocompleted",
        Severity.INFO,
        model,
        CONFIG_FILENAME,
        message,
        f"write {CONFIG_FILENAME} to pin max_batch_size and dims; GET /v2/models/{model}/config shows "
        "the completed config",
    )


def _model_file_missing(model: str, field: str, filename: str) -> Finding:
    return Finding(
        "model-file-missing",
        Severity.ERROR,
        model,
        field,
        f"{filename} is missing from the version folder",
        "put the ONNX file in the version folder, or set default_model_filename to its name",
    )


def _not_loadable(model: str, field: str, reason: str) -> Finding:
    return Finding(
        "model-not-loadable",
        Severity.ERROR,
        model,
        field,
        reason,
        not_loadable_hint(reason),
    )


def _silent(_: str) -> None:
    """Progress goes nowhere unless the caller asks for it."""
