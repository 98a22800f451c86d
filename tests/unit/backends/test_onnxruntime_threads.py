"""One intra-op thread for short runs (``conch.backends.onnxruntime_threads``), on real sessions.

The two models are far apart on purpose: ``add_sub`` runs 64 rows in microseconds, ``slow_identity``
in tens of milliseconds, so the decision does not hang on this machine's speed at the moment.
"""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from tritonclient.grpc import model_config_pb2 as mc

from conch.backends.onnxruntime import open_session
from conch.backends.onnxruntime_threads import PROBE_ROWS, one_thread_session, probe_feed
from conch.backends.placement import Placement
from conch.lifecycle.loader import LoadOptions, ModelLoader
from conch.lifecycle.model_control import ControlSettings, ModelControl
from conch.models.served_models import ServedModels
from tests.fixtures.onnx_models import (
    add_sub_model,
    slow_identity_model,
    string_model,
    variable_dims_model,
    write_repository,
)

CPU = [Placement()]


def saved(tmp_path: Path, model: onnx.ModelProto) -> Path:
    path = tmp_path / "model.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def config(max_batch_size: int = 8, parameters: dict[str, str] | None = None) -> mc.ModelConfig:
    built = mc.ModelConfig(name="m", max_batch_size=max_batch_size)
    for key, value in (parameters or {}).items():
        built.parameters[key].string_value = value
    return built


def threads_of(session: object) -> int:
    return int(session.get_session_options().intra_op_num_threads)  # type: ignore[attr-defined]


def test_a_model_whose_runs_are_short_gets_a_session_on_one_thread(tmp_path: Path) -> None:
    session = one_thread_session(saved(tmp_path, add_sub_model()), config(), CPU, cores=2)

    assert session is not None
    assert threads_of(session) == 1


def test_a_model_whose_runs_are_long_keeps_the_default_threads(tmp_path: Path) -> None:
    model = saved(tmp_path, slow_identity_model(width=512, layers=8))

    assert one_thread_session(model, config(max_batch_size=64), CPU, cores=2) is None


@pytest.mark.parametrize(
    ("parameters", "cores", "placements"),
    [
        ({"intra_op_thread_count": "2"}, 2, CPU),  # the config's own choice stands
        ({}, 1, CPU),  # one thread is the default already
        ({}, 2, [Placement(gpu=True)]),  # a GPU session is not ONNX Runtime's CPU threads
    ],
    ids=["config sets the threads", "one core", "gpu instance"],
)
def test_no_timed_run_where_the_threads_are_decided_otherwise(
    tmp_path: Path, parameters: dict[str, str], cores: int, placements: list[Placement]
) -> None:
    model = saved(tmp_path, add_sub_model())

    assert one_thread_session(model, config(parameters=parameters), placements, cores) is None


@pytest.mark.parametrize(
    "model", [variable_dims_model, string_model], ids=["dynamic dim besides the batch", "strings"]
)
def test_a_model_that_cannot_be_fed_zeros_keeps_the_default(tmp_path: Path, model: object) -> None:
    path = saved(tmp_path, model())  # type: ignore[operator]

    assert one_thread_session(path, config(), CPU, cores=2) is None


def test_the_probe_feeds_the_largest_batch_up_to_its_cap(tmp_path: Path) -> None:
    session = open_session(saved(tmp_path, add_sub_model()), config())

    small = probe_feed(session, config(max_batch_size=8))
    large = probe_feed(session, config(max_batch_size=1000))

    assert small is not None and large is not None
    assert {name: array.shape for name, array in small.items()} == {"INPUT0": (8, 16), "INPUT1": (8, 16)}
    assert large["INPUT0"].shape == (PROBE_ROWS, 16)


def test_the_loader_serves_a_short_model_on_one_thread_and_a_long_one_on_the_cores(tmp_path: Path) -> None:
    repository = ServedModels(
        write_repository(
            tmp_path / "models",
            {
                "short": (add_sub_model(), 'name: "short"\nmax_batch_size: 8\n'),
                "long": (slow_identity_model(width=512, layers=8), 'name: "long"\nmax_batch_size: 64\n'),
            },
        )
    )
    control = ModelControl(repository, ModelLoader(LoadOptions(cpu_cores=2)), ControlSettings())
    control.load_startup()

    def served_threads(name: str) -> int:
        scheduler = repository.models[name].ready_version("").scheduler
        (instance,) = scheduler._pool.instances  # type: ignore[union-attr]  # the sessions it runs
        return threads_of(instance.session)

    assert served_threads("short") == 1
    assert served_threads("long") == 2
