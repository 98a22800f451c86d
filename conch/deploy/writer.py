"""Manifests as files a person reads: block-style YAML in the settings' key order, one object a file.

Each file starts with a comment saying what wrote it, so a reader of the Git tree knows to re-run the
command rather than hand-edit a generated value; a ``preamble`` (an alternate object, say) follows as
comment lines.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from conch.core.version import VERSION


@dataclass(frozen=True)
class WrittenFile:
    path: Path
    kind: str
    name: str


class _ReadableDumper(yaml.SafeDumper):
    """Block style, and multi-line strings (a ``release.yaml`` in a ConfigMap) as ``|`` blocks."""


def _string(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    style = "|" if "\n" in text and not text.endswith(" ") else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_ReadableDumper.add_representer(str, _string)


def manifest_text(manifest: dict[str, Any], preamble: str = "") -> str:
    """The YAML of one object, under the header and the ``preamble`` as comments."""
    lines = [f"# Written by conch {VERSION} (conch deploy); re-run it rather than editing by hand."]
    if preamble:
        lines += ["#", *(f"# {line}".rstrip() for line in preamble.splitlines())]
    body = yaml.dump(
        manifest,
        Dumper=_ReadableDumper,
        sort_keys=False,
        default_flow_style=False,
        width=100,
        allow_unicode=True,
    )
    return "\n".join(lines) + "\n" + body


def write_manifests(folder: Path, files: Iterable[tuple[str, dict[str, Any], str]]) -> list[WrittenFile]:
    """Write each ``(filename, manifest, preamble)`` into ``folder`` (created), replacing what is there."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for filename, manifest, preamble in files:
        path = folder / filename
        path.write_text(manifest_text(manifest, preamble), encoding="utf-8")
        written.append(WrittenFile(path, manifest["kind"], manifest["metadata"]["name"]))
    return written
