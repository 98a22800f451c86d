"""``place_staged_model``: export and install put a staged model in place whole, or not at all."""

from __future__ import annotations

from pathlib import Path

import pytest

from conch.packaging.placing import place_staged_model


def staged_model(root: Path, config: str) -> Path:
    staged = root / "staged"
    (staged / "2").mkdir(parents=True)
    (staged / "2" / "model.onnx").write_bytes(b"new")
    (staged / "config.pbtxt").write_text(config)
    (staged / "warmup").mkdir()
    (staged / "warmup" / "new.bin").write_bytes(b"\0")
    return staged


def existing_model(root: Path) -> Path:
    model_dir = root / "repo" / "m"
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "config.pbtxt").write_text("old")
    (model_dir / "warmup").mkdir()
    (model_dir / "warmup" / "old.bin").write_bytes(b"\0")
    return model_dir


def test_new_files_replace_the_old_config_and_warm_up_folder(tmp_path: Path) -> None:
    staged, model_dir = staged_model(tmp_path, "new"), existing_model(tmp_path)
    trash = tmp_path / "trash"
    trash.mkdir()

    place_staged_model(staged, model_dir, "2", model_files=True, trash=trash)

    assert (model_dir / "config.pbtxt").read_text() == "new"
    assert sorted(p.name for p in (model_dir / "warmup").iterdir()) == ["new.bin"]
    assert sorted(p.name for p in model_dir.iterdir()) == ["1", "2", "config.pbtxt", "warmup"]


def test_a_failed_rename_leaves_the_model_folder_as_it_was(tmp_path: Path) -> None:
    staged, model_dir = staged_model(tmp_path, "new"), existing_model(tmp_path)
    (model_dir / "2").mkdir()
    (model_dir / "2" / "taken").write_bytes(b"")  # a non-empty folder: the version rename fails
    trash = tmp_path / "trash"
    trash.mkdir()

    with pytest.raises(OSError):
        place_staged_model(staged, model_dir, "2", model_files=True, trash=trash)

    assert (model_dir / "config.pbtxt").read_text() == "old"
    assert sorted(p.name for p in (model_dir / "warmup").iterdir()) == ["old.bin"]
    assert (staged / "config.pbtxt").read_text() == "new", "the staged files are back where they were"
