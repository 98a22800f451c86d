"""``conch validate`` on a Python-backend model: what can be checked without running its code.

Why not more: a Python model's inputs and outputs are whatever its ``model.py`` reads and writes, and
its ``auto_complete_config`` may still change the config, so the graph checks of an ONNX model have
nothing to compare with, and running ``initialize`` here would run the model's own code (its imports,
its files, its BLS calls to models that are not loaded) outside the server. What is checked: every
version folder has the model file the server imports, and the scheduler's section follows the server's
rules. The server checks the rest when it loads the model (``docs/configuration.md``).
"""

from __future__ import annotations

from conch.core.findings import Finding, Severity
from conch.repository.config_validation import batching_findings
from conch.validation.model_folder import ModelFolder, version_numbers


def python_model_findings(folder: ModelFolder) -> list[Finding]:
    """The version folders' findings, a missing model file per version, then the batching section's."""
    numbers, found = version_numbers(folder)
    filename = folder.config.default_model_filename
    found += [
        Finding(
            "model-file-missing",
            Severity.ERROR,
            folder.name,
            f"{number}/{filename}",
            f"version {number}: {filename} is missing from the version folder",
            f"put the model's {filename} (a class TritonPythonModel) in the version folder, or set "
            "default_model_filename to its name",
        )
        for number in numbers
        if not (folder.path / str(number) / filename).is_file()
    ]
    return found + batching_findings(folder.config, folder.name)
