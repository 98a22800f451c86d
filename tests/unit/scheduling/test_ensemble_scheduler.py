"""The ensemble scheduler's machinery: steps run as their inputs arrive, arms of a diamond together,
a failed step named, a replaced step model checked again.

The step models here answer through a stand-in for the server's request path (``infer``), which lets
a test hold one step until another has started: concurrency shown by events, not by timing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import numpy as np
import pytest

from conch.core.errors import ConchError, ErrorKind, InvalidArgumentError, UnavailableError
from conch.core.types import InferenceRequest, InferenceResponse, Tensor
from conch.models.model import Model, ModelState, ModelVersion
from conch.observability.statistics import ModelStatistics
from conch.repository.config import parse_config
from conch.scheduling.ensemble.plan import plan_ensemble
from conch.scheduling.ensemble.scheduler import EnsembleScheduler
from conch.scheduling.scheduler import ScheduledRequest
from tests.fixtures.ensembles import ensemble_config

X = ("X", "TYPE_FP32", [4])
DIAMOND = [
    ("double", {"INPUT0": "X"}, {"OUTPUT0": "D"}),
    ("left", {"INPUT0": "D"}, {"OUTPUT0": "L"}),
    ("right", {"INPUT0": "D"}, {"OUTPUT0": "R"}),
    ("join", {"INPUT0": "L", "INPUT1": "R"}, {"OUTPUT0": "Y", "OUTPUT1": "Z"}),
]
Handler = Callable[[dict[str, np.ndarray]], Awaitable[dict[str, np.ndarray]]]


def served(name: str, inputs: list[str], outputs: list[str], data_type: str = "TYPE_FP32") -> Model:
    def tensors(names: list[str]) -> str:
        return ", ".join(f'{{ name: "{n}" data_type: {data_type} dims: [ 4 ] }}' for n in names)

    config = parse_config(
        f'name: "{name}" max_batch_size: 4 input [ {tensors(inputs)} ] output [ {tensors(outputs)} ]'
    )
    version = ModelVersion(name, 1, config, state=ModelState.READY)
    return Model(name, versions={1: version})


def step_models() -> dict[str, Model]:
    return {
        "double": served("double", ["INPUT0"], ["OUTPUT0"]),
        "left": served("left", ["INPUT0"], ["OUTPUT0"]),
        "right": served("right", ["INPUT0"], ["OUTPUT0"]),
        "join": served("join", ["INPUT0", "INPUT1"], ["OUTPUT0", "OUTPUT1"]),
    }


def scheduler_for(
    handlers: dict[str, Handler], models: dict[str, Model], statistics: ModelStatistics | None = None
) -> EnsembleScheduler:
    config = parse_config(
        ensemble_config(
            "e", [X], [("Y", "TYPE_FP32", [4]), ("Z", "TYPE_FP32", [4])], DIAMOND, max_batch_size=4
        )
    )

    async def infer(request: InferenceRequest) -> InferenceResponse:
        outputs = await handlers[request.model_name]({t.name: t.data for t in request.inputs})
        wanted = [o.name for o in request.outputs]
        return InferenceResponse(
            request.model_name, "1", outputs=[Tensor(n, "FP32", outputs[n]) for n in wanted]
        )

    counted = statistics or ModelStatistics("e", "1")
    return EnsembleScheduler(config, plan_ensemble(config), infer, models.get, counted)


def arithmetic(started: dict[str, asyncio.Event]) -> dict[str, Handler]:
    """double, left (x3) and right (x-1), where each arm waits until the other has started, and join."""

    async def double(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"OUTPUT0": inputs["INPUT0"] * 2}

    def arm(me: str, other: str, factor: float) -> Handler:
        async def run(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            started[me].set()
            await started[other].wait()  # never returns if the arms ran one after the other
            return {"OUTPUT0": inputs["INPUT0"] * factor}

        return run

    async def join(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {
            "OUTPUT0": inputs["INPUT0"] + inputs["INPUT1"],
            "OUTPUT1": inputs["INPUT0"] - inputs["INPUT1"],
        }

    return {
        "double": double,
        "left": arm("left", "right", 3),
        "right": arm("right", "left", -1),
        "join": join,
    }


def request(x: np.ndarray, outputs: list[str]) -> ScheduledRequest:
    return ScheduledRequest({"X": x}, outputs, rows=x.shape[0])


def run(coroutine: Awaitable[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    async def bounded() -> dict[str, np.ndarray]:
        return await asyncio.wait_for(coroutine, timeout=5)

    return asyncio.run(bounded())


def test_the_arms_of_a_diamond_run_together_and_only_the_asked_outputs_return() -> None:
    async def scenario() -> dict[str, np.ndarray]:
        started = {"left": asyncio.Event(), "right": asyncio.Event()}
        scheduler = scheduler_for(arithmetic(started), step_models())
        return await scheduler.schedule(request(np.ones((2, 4), np.float32), ["Z"]))

    outputs = run(scenario())
    assert list(outputs) == ["Z"]
    np.testing.assert_array_equal(outputs["Z"], np.full((2, 4), 8.0, np.float32))  # 6 - (-2)


def test_the_ensemble_counts_one_execution_of_its_rows() -> None:
    statistics = ModelStatistics("e", "1")

    async def scenario() -> None:
        started = {"left": asyncio.Event(), "right": asyncio.Event()}
        scheduler = scheduler_for(arithmetic(started), step_models(), statistics)
        await scheduler.schedule(request(np.ones((3, 4), np.float32), ["Y"]))

    asyncio.run(scenario())
    assert (statistics.execution_count, statistics.inference_count) == (1, 3)


def test_a_failed_step_is_named_with_its_kind_after_its_sibling_finished() -> None:
    finished: list[str] = []

    async def scenario() -> None:
        started = {"left": asyncio.Event(), "right": asyncio.Event()}
        handlers = arithmetic(started)

        async def refusing(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            started["right"].set()
            raise InvalidArgumentError("input 'INPUT0' is wrong")

        left = handlers["left"]

        async def left_then_note(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            await asyncio.sleep(0.01)
            outputs = await left(inputs)
            finished.append("left")
            return outputs

        handlers["right"], handlers["left"] = refusing, left_then_note
        await scheduler_for(handlers, step_models()).schedule(request(np.ones((1, 4), np.float32), ["Y"]))

    with pytest.raises(ConchError) as raised:
        asyncio.run(scenario())
    assert raised.value.kind is ErrorKind.INVALID_ARGUMENT
    assert raised.value.message == "ensemble 'e' step 2 (model 'right'): input 'INPUT0' is wrong"
    assert finished == ["left"]


def test_a_step_model_replaced_by_one_that_disagrees_is_refused_at_the_next_request() -> None:
    models = step_models()

    async def scenario() -> None:
        started = {"left": asyncio.Event(), "right": asyncio.Event()}
        scheduler = scheduler_for(arithmetic(started), models)
        await scheduler.schedule(request(np.ones((1, 4), np.float32), ["Y"]))
        models["left"] = served("left", ["INPUT0"], ["OUTPUT0"], data_type="TYPE_INT32")
        await scheduler.schedule(request(np.ones((1, 4), np.float32), ["Y"]))

    with pytest.raises(UnavailableError) as raised:
        asyncio.run(scenario())
    assert raised.value.message.startswith("ensemble 'e' tensor 'D' is TYPE_FP32 for step 0 (model 'double')")
    assert "cannot run with the step models served now" in raised.value.message


def test_a_step_model_without_a_ready_version_is_503_with_its_reason() -> None:
    models = step_models()
    models["join"] = Model("join", reason="config.pbtxt does not parse")

    async def scenario() -> None:
        scheduler = scheduler_for(arithmetic({"left": asyncio.Event(), "right": asyncio.Event()}), models)
        await scheduler.schedule(request(np.ones((1, 4), np.float32), ["Y"]))

    with pytest.raises(UnavailableError) as raised:
        asyncio.run(scenario())
    assert raised.value.message == (
        "ensemble 'e' step 'join' is not available: model 'join' has no ready version: config.pbtxt does "
        "not parse"
    )


def test_an_optional_ensemble_input_left_out_is_left_out_of_its_step() -> None:
    steps = [("pick", {"INPUT0": "X", "INPUT1": "EXTRA"}, {"OUTPUT0": "Y"})]
    config = parse_config(
        ensemble_config(
            "e", [X, ("EXTRA", "TYPE_FP32", [4])], [("Y", "TYPE_FP32", [4])], steps, max_batch_size=4
        )
    )
    config.input[1].optional = True
    seen: list[list[str]] = []

    async def infer(request: InferenceRequest) -> InferenceResponse:
        seen.append([t.name for t in request.inputs])
        return InferenceResponse("pick", "1", outputs=[Tensor("OUTPUT0", "FP32", request.inputs[0].data)])

    models = {"pick": served("pick", ["INPUT0", "INPUT1"], ["OUTPUT0"])}
    models["pick"].versions[1].config.input[1].optional = True
    scheduler = EnsembleScheduler(config, plan_ensemble(config), infer, models.get, ModelStatistics("e", "1"))
    outputs = run(scheduler.schedule(request(np.ones((1, 4), np.float32), ["Y"])))
    assert seen == [["INPUT0"]]
    np.testing.assert_array_equal(outputs["Y"], np.ones((1, 4), np.float32))
