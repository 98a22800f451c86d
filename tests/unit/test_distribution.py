"""The wheel carries every package of ``conch/``: pyproject.toml lists them one by one (the examples and
the guides are mapped into the package by ``package-dir``), so a new folder must be added there, or a
non-editable ``pip install .`` fails at import while the editable checkout works."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_under_conch_is_listed_in_pyproject() -> None:
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {
        ".".join(init.parent.relative_to(ROOT).parts) for init in (ROOT / "conch").rglob("__init__.py")
    }

    assert "conch.backends.python" in on_disk
    assert sorted(on_disk - listed) == []
