"""Loading a model repository: every model gets a state, and one failure never stops the others."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from conch.core.errors import NotFoundError
from conch.lifecycle.load_options import LoadOptions
from conch.models.model import ModelState
from conch.models.served_models import ServedModels
from tests.fixtures.model_folders import load_repository
from tests.fixtures.onnx_models import add_sub_model, fixed_shape_model, string_model, write_repository


@contextmanager
def loaded(root: Path, options: LoadOptions | None = None) -> Iterator[ServedModels]:
    """``root`` loaded as the server loads it at start-up, closed on exit."""
    repository = load_repository(root, options)
    try:
        yield repository
    finally:
        repository.close()


@pytest.fixture
def repository(tmp_path: Path) -> Iterator[ServedModels]:
    """A repository with one model of each outcome; closed after the test."""
    root = write_repository(
        tmp_path / "models",
        {
            "simple": (add_sub_model(), None),
            "fixed": (fixed_shape_model(), 'name: "fixed"\ninstance_group [ { count: 2 } ]\n'),
            "broken_config": (add_sub_model(), 'name: "broken_config"\nmax_batch_size: lots\n'),
            "renamed": (add_sub_model(), 'name: "original"\n'),
            "text": (string_model(), "version_policy { all { } }\n"),
        },
    )
    (root / "text" / "2").mkdir()
    (root / "text" / "2" / "model.onnx").write_bytes(b"not an onnx file")
    (root / "notes.txt").write_text("files at the top of a repository are not models")
    (root / ".cache").mkdir()
    with loaded(root) as repository:
        yield repository


def test_models_are_the_folders(repository: ServedModels) -> None:
    assert sorted(repository.models) == ["broken_config", "fixed", "renamed", "simple", "text"]


def test_good_model_is_ready_with_a_completed_config(repository: ServedModels) -> None:
    simple = repository.model("simple")

    assert simple.state is ModelState.READY
    version = simple.version("")
    assert version.version == 1
    assert version.config.max_batch_size == 4
    assert [i.name for i in version.config.input] == ["INPUT0", "INPUT1"]
    assert version.scheduler is not None


def test_fixed_shape_model_with_two_instances(repository: ServedModels) -> None:
    version = repository.model("fixed").ready_version("1")

    assert version.config.max_batch_size == 0
    assert [(g.name, g.count) for g in version.config.instance_group] == [("fixed_0", 2)]
    assert version.scheduler is not None


def test_unparsable_config_leaves_the_model_unavailable_without_versions(repository: ServedModels) -> None:
    broken = repository.model("broken_config")

    assert broken.state is ModelState.UNAVAILABLE
    assert broken.versions == {}
    assert broken.reason.startswith("config.pbtxt does not parse: 2:")


def test_config_name_must_match_the_folder(repository: ServedModels) -> None:
    renamed = repository.model("renamed")

    assert renamed.state is ModelState.UNAVAILABLE
    assert renamed.reason == "config name 'original' does not match its folder 'renamed'"


def test_a_version_that_is_not_onnx_is_unavailable_alone(repository: ServedModels) -> None:
    text = repository.model("text")

    assert text.state is ModelState.READY
    assert text.versions[1].state is ModelState.READY
    broken = text.versions[2]
    assert broken.state is ModelState.UNAVAILABLE
    assert broken.scheduler is None
    assert broken.reason.startswith("model.onnx is not a loadable ONNX model")
    assert "models" not in broken.reason
    assert text.version("").version == 1


def test_unknown_model_is_not_found(repository: ServedModels) -> None:
    with pytest.raises(NotFoundError, match=r"^Request for unknown model: 'bert' is not found$"):
        repository.model("bert")


def test_unknown_model_suggests_the_closest_served_names(repository: ServedModels) -> None:
    close = next(iter(repository.models))
    typo = close[:-1]

    with pytest.raises(NotFoundError) as caught:
        repository.model(typo)

    assert caught.value.message.startswith(f"Request for unknown model: '{typo}' is not found; did you mean")
    assert f"'{close}'" in caught.value.message


def test_index_has_one_entry_per_version_or_per_failed_model(repository: ServedModels) -> None:
    entries = {(e["name"], e["version"]): (e["state"], e["reason"]) for e in repository.index()}

    assert entries.keys() == {
        ("broken_config", ""),
        ("fixed", "1"),
        ("renamed", ""),
        ("simple", "1"),
        ("text", "1"),
        ("text", "2"),
    }
    assert entries["simple", "1"] == ("READY", "")
    assert entries["renamed", ""] == (
        "UNAVAILABLE",
        "config name 'original' does not match its folder 'renamed'",
    )
    assert entries["text", "2"][0] == "UNAVAILABLE"


def test_index_of_ready_versions(repository: ServedModels) -> None:
    ready = [(e["name"], e["version"]) for e in repository.index(ready_only=True)]

    assert ready == [("fixed", "1"), ("simple", "1"), ("text", "1")]


def test_all_ready_needs_every_version_of_every_model(repository: ServedModels, tmp_path: Path) -> None:
    assert not repository.all_ready

    with loaded(write_repository(tmp_path / "healthy", {"simple": (add_sub_model(), None)})) as healthy:
        assert healthy.all_ready


def test_model_without_matching_version_folder(tmp_path: Path) -> None:
    root = write_repository(
        tmp_path, {"simple": (add_sub_model(), "version_policy { specific { versions: 7 } }")}
    )
    with loaded(root) as repository:
        simple = repository.model("simple")

    assert simple.state is ModelState.UNAVAILABLE
    assert simple.reason == "no version folder matches the version policy"
    assert not repository.all_ready


def test_server_default_max_batch_size(tmp_path: Path) -> None:
    root = write_repository(tmp_path, {"simple": (add_sub_model(), None)})

    with loaded(root, LoadOptions(default_max_batch_size=16)) as repository:
        assert repository.model("simple").ready_version("1").config.max_batch_size == 16


def test_config_that_disagrees_with_the_graph(tmp_path: Path) -> None:
    config = 'max_batch_size: 4\ninput [ { name: "INPUT0", data_type: TYPE_INT32, dims: [ 16 ] } ]\n'
    with loaded(write_repository(tmp_path, {"simple": (add_sub_model(), config)})) as repository:
        version = repository.model("simple").versions[1]

    assert version.state is ModelState.UNAVAILABLE
    assert version.reason == "config input 'INPUT0' has data_type TYPE_INT32 but the model's is FP32"


def test_batching_and_reshape_rules_are_checked_at_load(tmp_path: Path) -> None:
    root = write_repository(
        tmp_path / "models",
        {
            "preferred": (
                add_sub_model(),
                "max_batch_size: 4\ndynamic_batching { preferred_batch_size: [8] }\n",
            ),
            "unbatched": (fixed_shape_model(), "max_batch_size: 0\ndynamic_batching { }\n"),
        },
    )
    with loaded(root) as repository:
        preferred = repository.model("preferred").versions[1]
        unbatched = repository.model("unbatched").versions[1]
        assert preferred.state is ModelState.UNAVAILABLE
        assert "preferred_batch_size 8 is not between 1 and max_batch_size 4" in preferred.reason
        assert unbatched.state is ModelState.UNAVAILABLE
        assert "max_batch_size is 0" in unbatched.reason
