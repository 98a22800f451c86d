"""A model folder read the way the server reads it: ``config.pbtxt`` parsed with its defaults completed,
and the version folders the server would see.

What counts as a model folder (rather than a repository of them): a folder holding ``config.pbtxt`` or
at least one folder whose name is all digits. A repository is a folder whose subfolders include a model
folder; every other non-hidden subfolder of a repository is a model too, because the server tries to
load it as one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from conch.backends.kinds import infer_backend
from conch.core.errors import InvalidArgumentError
from conch.core.findings import Finding, Severity
from conch.packaging.metadata import CONFIG_FILENAME, WARMUP_FOLDER
from conch.repository.autocomplete import complete_defaults
from conch.repository.config import fields_set_in_text, parse_config
from conch.repository.version_policy import select_versions, version_folders


class NotAModelOrRepositoryError(ValueError):
    """The path is neither a model folder nor a repository of model folders: a usage error."""


@dataclass(frozen=True)
class ModelFolder:
    """A model folder whose config parsed; ``config`` has the server's model-level defaults filled in."""

    path: Path
    config: mc.ModelConfig
    fields_set: set[str]
    has_config_file: bool

    @property
    def name(self) -> str:
        return self.path.name


def is_model_folder(path: Path) -> bool:
    """``config.pbtxt`` or a numeric subfolder: the marks of a model folder (see the module docstring)."""
    if (path / CONFIG_FILENAME).is_file():
        return True
    return any(child.is_dir() and child.name.isdigit() for child in path.iterdir())


def model_folders(path: Path) -> list[Path]:
    """``path`` itself when it is a model folder, else the model folders of the repository it is."""
    if not path.is_dir():
        raise NotAModelOrRepositoryError(f"'{path}' is not a folder")
    if is_model_folder(path):
        return [path]
    children = sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not any(is_model_folder(child) for child in children):
        raise NotAModelOrRepositoryError(
            f"'{path}' is neither a model folder (config.pbtxt or a numeric version folder such as 1/) "
            "nor a repository of model folders"
        )
    return children


def read_model_folder(path: Path) -> tuple[ModelFolder | None, list[Finding]]:
    """Parse and complete the model-level config; None when ``config.pbtxt`` does not parse."""
    config_path = path / CONFIG_FILENAME
    if not config_path.is_file():
        config = mc.ModelConfig()
        infer_backend(config, path)
        complete_defaults(config, path.name)
        return ModelFolder(path, config, set(), has_config_file=False), []
    text = config_path.read_text(encoding="utf-8", errors="replace")
    try:
        config = parse_config(text)
    except InvalidArgumentError as exc:
        return None, [
            Finding(
                "config-unparsable",
                Severity.ERROR,
                path.name,
                CONFIG_FILENAME,
                exc.message,
                "fix the text at that line and column: field names and values are those of Triton's "
                "ModelConfig (model_config.proto)",
            )
        ]
    fields = fields_set_in_text(config, text)
    infer_backend(config, path)
    complete_defaults(config, path.name)
    return ModelFolder(path, config, fields, has_config_file=True), []


def version_numbers(folder: ModelFolder) -> tuple[list[int], list[Finding]]:
    """Every numeric version folder (all are validated, served or not), and what is wrong with the rest."""
    numbers = version_folders(folder.path)
    found = [
        Finding(
            "version-folder-ignored",
            Severity.WARNING,
            folder.name,
            name,
            f"folder '{name}' is not a version number, so the server ignores it",
            "name version folders 1, 2, 3... (no leading zeros), or move this folder out of the model",
        )
        for name in _ignored_folders(folder.path, numbers)
    ]
    if not numbers:
        message = "the model has no version folder, so nothing would be served"
    elif not select_versions(folder.config.version_policy, numbers):
        message = f"no version folder matches the version policy (versions present: {numbers})"
    else:
        return numbers, found
    found.append(
        Finding(
            "no-version",
            Severity.ERROR,
            folder.name,
            "version_policy",
            message,
            "put the model file in a numeric version folder (<model>/1/model.onnx), and make "
            "version_policy select it",
        )
    )
    return numbers, found


def _ignored_folders(path: Path, numbers: list[int]) -> list[str]:
    """Subfolders the server skips: not a version (``abc``, ``01``), not ``warmup/``, not hidden."""
    return [
        child.name
        for child in sorted(path.iterdir())
        if child.is_dir()
        and not child.name.startswith(".")
        and child.name != WARMUP_FOLDER
        and child.name not in {str(number) for number in numbers}
    ]
