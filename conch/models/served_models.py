"""The models of a Triton-style repository folder, as they are served now, by name.

This is what the server reads on every request: the model by name, its versions and their states.
Which folders exist comes from here too. Building a model (sessions, warm-up, schedulers) and
changing what is served belong to :mod:`conch.lifecycle`, which replaces a model here in one
assignment, so a request sees either the old model or the new one, never half of each.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from conch.core.errors import NotFoundError, did_you_mean
from conch.models.model import Model, ModelVersion

log = logging.getLogger(__name__)


class ServedModels:
    """The models under one repository folder, by name."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.models: dict[str, Model] = {}
        #: Models being loaded that serve nothing yet (the index shows them LOADING).
        self.loading: set[str] = set()
        #: Versions replaced or unloaded that still finish their requests (the index shows UNLOADING).
        self.draining: list[ModelVersion] = []

    def model_folders(self) -> list[Path]:
        """The repository's model folders; hidden ones (``.name``, export's staging) are skipped."""
        if not self.root.is_dir():
            return []
        return sorted(p for p in self.root.iterdir() if p.is_dir() and not p.name.startswith("."))

    def table(self) -> str:
        """The start-up table of models, versions and states, as Triton prints it."""
        rows = [("Model", "Version", "Status")]
        for entry in self.index():
            status = entry["state"] + (f": {entry['reason']}" if entry["reason"] else "")
            rows.append((entry["name"], entry["version"] or "-", status))
        widths = [max(len(row[i]) for row in rows) for i in range(3)]
        line = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
        cells = [zip(row, widths, strict=True) for row in rows]
        body = ["| " + " | ".join(c.ljust(w) for c, w in row) + " |" for row in cells]
        return "\n".join([line, body[0], line, *body[1:], line])

    def model(self, name: str) -> Model:
        """The model called ``name``, or a 404 in Triton's words with the closest served names."""
        found = self.models.get(name)
        if found is None:
            raise NotFoundError(
                f"Request for unknown model: '{name}' is not found{did_you_mean(name, self.models)}"
            )
        return found

    def not_ready(self) -> list[str]:
        """Each model or version that is not READY, with its reason in brief: ``'x' version 1 (why)``."""
        lines = []
        for name, model in sorted(self.models.items()):
            if model.unloaded:
                continue
            if not model.versions:
                lines.append(f"'{name}' ({_brief(model.reason or 'no version')})")
            lines += [
                f"'{name}' version {number} ({_brief(version.reason or version.state.value)})"
                for number, version in sorted(model.versions.items())
                if not version.ready
            ]
        lines += [f"'{name}' (loading)" for name in sorted(self.loading) if name not in self.models]
        return lines

    @property
    def all_ready(self) -> bool:
        """Every model has a version and every served version is READY (strict readiness).

        A model unloaded on request no longer counts, as in Triton; nor does a failed reload while the
        versions before it still serve.
        """
        served = [m for m in self.models.values() if not m.unloaded]
        return not self.loading - self.models.keys() and all(
            m.versions and ((m.degraded and m.ready_versions) or all(v.ready for v in m.versions.values()))
            for m in served
        )

    def index(self, ready_only: bool = False) -> list[dict[str, Any]]:
        """Triton's repository index: one entry per version, or per model when it has none."""
        entries: list[dict[str, Any]] = []
        names = sorted(self.models.keys() | self.loading)
        for name in names:
            model = self.models.get(name)
            if model is None:
                if not ready_only:
                    entries.append({"name": name, "version": "", "state": "LOADING", "reason": ""})
                continue
            if not model.versions and not ready_only:
                entries.append({"name": name, "version": "", "state": "UNAVAILABLE", "reason": model.reason})
            entries += [
                _entry(version)
                for _, version in sorted(model.versions.items())
                if version.ready or not ready_only
            ]
            if not ready_only:
                entries += [_entry(version, "UNLOADING") for version in self.draining if version.name == name]
        return entries

    def versions(self) -> list[ModelVersion]:
        """Every version served or draining, for statistics and shutdown."""
        served = [v for m in self.models.values() for v in m.versions.values()]
        return served + [v for v in self.draining if v not in served]

    def close(self) -> None:
        """Stop every scheduler and its instances' worker threads."""
        for version in self.versions():
            version.close()


def _entry(version: ModelVersion, state: str | None = None) -> dict[str, Any]:
    return {
        "name": version.name,
        "version": str(version.version),
        "state": state or version.state.value,
        "reason": version.reason,
    }


#: Characters of a load failure that a one-line summary keeps; the repository index has the whole reason.
BRIEF_REASON_CHARS = 160


def _brief(reason: str) -> str:
    first_line = reason.splitlines()[0] if reason else reason
    if len(first_line) <= BRIEF_REASON_CHARS:
        return first_line
    return first_line[: BRIEF_REASON_CHARS - 1].rstrip() + "…"
