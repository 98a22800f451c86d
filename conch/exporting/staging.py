"""Write aside, then rename: an export either lands whole in the repository or leaves no trace.

The export is built in a hidden folder inside the repository (same filesystem, so renames are atomic;
hidden, so neither ``conch serve`` nor ``conch validate`` takes it for a model) laid out like the
model folder. A new model folder is then one rename. For an existing one the version folder is moved
in last, after the model-level files it needs, so a reader never sees a version without its config.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from conch.packaging.metadata import CONFIG_FILENAME, WARMUP_FOLDER

_REPLACED_WARMUP = "replaced-warmup"


class Staging:
    """A hidden copy-to-be of ``<repository>/<name>`` holding one new version folder."""

    def __init__(self, repository: Path, name: str, version: int) -> None:
        self.model_dir = repository / name
        self.root = Path(tempfile.mkdtemp(prefix=f".{name}-export-", dir=repository))
        self.version_dir = self.root / str(version)
        self.version_dir.mkdir()

    def commit(self, model_files: bool) -> None:
        """Move the staged version, and with ``model_files`` the config and warm-up, into the model folder."""
        if not self.model_dir.exists():
            os.rename(self.root, self.model_dir)
            return
        if model_files:
            self._replace_warmup()
            os.replace(self.root / CONFIG_FILENAME, self.model_dir / CONFIG_FILENAME)
        os.rename(self.version_dir, self.model_dir / self.version_dir.name)

    def discard(self) -> None:
        """Remove whatever is left of the staging folder (all of it when the export failed)."""
        shutil.rmtree(self.root, ignore_errors=True)

    def _replace_warmup(self) -> None:
        # Old warm-up files would linger beside the new ones and be checksummed as the model's own.
        current = self.model_dir / WARMUP_FOLDER
        if current.exists():
            os.rename(current, self.root / _REPLACED_WARMUP)
        if (self.root / WARMUP_FOLDER).exists():
            os.rename(self.root / WARMUP_FOLDER, current)
