"""Putting a staged model folder into a repository by renames, whole or not at all.

Why one module: ``conch export`` and ``conch install`` both stage a model beside the repository (same
filesystem, so each rename is atomic) and then move it in; both must replace an old config and warm-up
folder rather than mix them with the new ones, and both must leave the repository as it was when a
rename fails.
"""

from __future__ import annotations

from pathlib import Path

from conch.packaging.metadata import CONFIG_FILENAME, WARMUP_FOLDER


def place_staged_model(staged: Path, model_dir: Path, version: str, model_files: bool, trash: Path) -> None:
    """Move ``staged`` (laid out like a model folder, holding version folder ``version``) into place.

    A new model folder is one rename. Into an existing one, with ``model_files`` the config and
    warm-up folder go first (the old ones to ``trash``), then the version folder, so a reader never
    finds the new version beside the old config. If a rename fails, those done are undone.
    """
    if not model_dir.is_dir():
        _rename_all([(staged, model_dir)])
        return
    moves = []
    if model_files:
        for place in (WARMUP_FOLDER, CONFIG_FILENAME):
            if (model_dir / place).exists():
                moves.append((model_dir / place, trash / f"replaced-{place}"))
            if (staged / place).exists():
                moves.append((staged / place, model_dir / place))
    moves.append((staged / version, model_dir / version))
    _rename_all(moves)


def _rename_all(moves: list[tuple[Path, Path]]) -> None:
    """Rename each pair in order; if one fails, undo those done, newest first, and raise."""
    done: list[tuple[Path, Path]] = []
    try:
        for source, target in moves:
            source.rename(target)
            done.append((source, target))
    except OSError:
        for source, target in reversed(done):
            target.rename(source)
        raise
