"""The state dir: each model's release saved as ``<state_dir>/<model>.release.json``.

Release state lives outside the model repository, because a repository may be on S3, baked into an
image, or reverted by Argo CD's self-heal; a restart reads it back and resumes each release where it
was. A save writes a temporary file beside the target and renames it over the old one
(``os.replace``), so a crash mid-save leaves the previous state whole, never half a file.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from conch.core.errors import InvalidArgumentError
from conch.release.state import Release

SUFFIX = ".release.json"


def write_whole(path: Path, data: bytes) -> None:
    """``data`` at ``path``, whole or not at all: written beside it, synced, then renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


class ReleaseStore:
    """Saves and loads releases in one folder, created on the first save."""

    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        self.state_dir = Path(state_dir)

    def path_for(self, model: str) -> Path:
        """The file of ``model``'s release; a name that could leave the folder is refused."""
        if not model or model in (".", "..") or any(bad in model for bad in ("/", "\\", "\0", "..")):
            raise InvalidArgumentError(
                f"release state: model name {model!r} cannot name a state file: it must not be empty or "
                "contain '/', '\\' or '..'"
            )
        return self.state_dir / f"{model}{SUFFIX}"

    def save(self, model: str, release: Release, now: float) -> None:
        """Write ``model``'s release as of ``now``, replacing the one saved before, atomically."""
        text = json.dumps(release.to_json(now), indent=2, sort_keys=True)
        write_whole(self.path_for(model), text.encode())

    def load(self, model: str, now: float) -> Release | None:
        """``model``'s saved release, resumed at ``now``; ``None`` when none was saved."""
        path = self.path_for(model)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise InvalidArgumentError(f"release state {path.name}: not valid JSON: {error}") from None
        return Release.from_json(data, now, f"release state {path.name}")

    def delete(self, model: str) -> None:
        """Forget ``model``'s release (its ``release.yaml`` was removed); nothing saved is fine."""
        self.path_for(model).unlink(missing_ok=True)

    def models(self) -> list[str]:
        """The models with a saved release, sorted: the ones a restart resumes."""
        if not self.state_dir.is_dir():
            return []
        return sorted(path.name[: -len(SUFFIX)] for path in self.state_dir.glob(f"*{SUFFIX}"))
