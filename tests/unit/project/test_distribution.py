"""The wheel carries every package of ``conch/``: pyproject.toml lists them one by one (the examples and
the guides are mapped into the package by ``package-dir``), so a new folder must be added there, or a
non-editable ``pip install .`` fails at import while the editable checkout works."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_every_package_under_conch_is_listed_in_pyproject() -> None:
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {
        ".".join(init.parent.relative_to(ROOT).parts) for init in (ROOT / "conch").rglob("__init__.py")
    }

    assert "conch.backends.python" in on_disk
    assert sorted(on_disk - listed) == []


def test_every_data_file_under_conch_is_package_data() -> None:
    # A file read at run time (openapi.yaml) that no package-data glob names is left out of the wheel.
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    globs = setuptools["package-data"]
    unshipped = []
    for path in (ROOT / "conch").rglob("*"):
        if not path.is_file() or path.suffix in (".py", ".pyc", ".pyi") or "__pycache__" in path.parts:
            continue
        package = ".".join(path.parent.relative_to(ROOT).parts)
        if not any(path.match(pattern) for pattern in globs.get(package, [])):
            unshipped.append(path.relative_to(ROOT).as_posix())
    assert unshipped == []
