"""Write aside, then rename: an export either lands whole in the repository or leaves no trace.

The export is built in a hidden folder inside the repository (same filesystem, so renames are atomic;
hidden, so neither ``conch serve`` nor ``conch validate`` takes it for a model) laid out like the
model folder. A new model folder is then one rename. For an existing one the version folder is moved
in last, after the model-level files it needs (``conch.packaging.placing``, shared with install).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from conch.packaging.placing import place_staged_model


class Staging:
    """A hidden copy-to-be of ``<repository>/<name>`` holding one new version folder."""

    def __init__(self, repository: Path, name: str, version: int) -> None:
        self.model_dir = repository / name
        self.root = Path(tempfile.mkdtemp(prefix=f".{name}-export-", dir=repository))
        self.version_dir = self.root / str(version)
        self.version_dir.mkdir()

    def commit(self, model_files: bool) -> None:
        """Move the staged version, and with ``model_files`` the config and warm-up, into the model folder."""
        place_staged_model(self.root, self.model_dir, self.version_dir.name, model_files, trash=self.root)

    def discard(self) -> None:
        """Remove whatever is left of the staging folder (all of it when the export failed)."""
        shutil.rmtree(self.root, ignore_errors=True)
