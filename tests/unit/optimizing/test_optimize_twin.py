"""The quantized twin's rules: what the config says, which versions load, which one answers."""

from __future__ import annotations

import pytest
from tritonclient.grpc import model_config_pb2 as mc

from conch.core.errors import InvalidArgumentError
from conch.repository.quantized_twin import QuantizedTwin, twin_from_config


def config(**parameters: str) -> mc.ModelConfig:
    built = mc.ModelConfig(name="digits")
    for key, value in parameters.items():
        built.parameters[key].string_value = value
    return built


def test_no_twin_parameters_is_no_twin() -> None:
    assert twin_from_config(config(), gpu=False) is None


@pytest.mark.parametrize(
    ("preference", "gpu", "prefers"),
    [
        (None, False, True),  # the default, no_gpu, on a CPU-only machine
        (None, True, False),
        ("no_gpu", False, True),
        ("no_gpu", True, False),
        ("always", True, True),
        ("NEVER", False, False),
    ],
)
def test_preference_resolves_for_this_server(preference: str | None, gpu: bool, prefers: bool) -> None:
    extra = {} if preference is None else {"prefer_quantized": preference}
    twin = twin_from_config(config(quantized_twin="2", quantized_twin_of="1", **extra), gpu=gpu)
    assert twin == QuantizedTwin(quantized=2, source=1, prefers_quantized=prefers)


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({"quantized_twin": "2"}, "'quantized_twin_of' is missing"),
        ({"quantized_twin_of": "1"}, "'quantized_twin' is missing"),
        ({"quantized_twin": "two", "quantized_twin_of": "1"}, "must be a version number"),
        ({"quantized_twin": "0", "quantized_twin_of": "1"}, "must be a version number"),
        ({"quantized_twin": "1", "quantized_twin_of": "1"}, "both name version 1"),
        (
            {"quantized_twin": "2", "quantized_twin_of": "1", "prefer_quantized": "yes"},
            "must be one of always, never, no_gpu, got 'yes'",
        ),
    ],
)
def test_bad_twin_parameters_are_refused_by_name(parameters: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        twin_from_config(config(**parameters), gpu=False)


QUANTIZED = QuantizedTwin(quantized=2, source=1, prefers_quantized=True)
FULL_PRECISION = QuantizedTwin(quantized=2, source=1, prefers_quantized=False)


def test_the_pair_shares_one_slot_of_the_policy() -> None:
    # latest { 1 } picks the twin, the newest folder; a GPU server loads the fp32 version instead.
    assert FULL_PRECISION.served_versions([2], available=[1, 2]) == [1]
    assert QUANTIZED.served_versions([2], available=[1, 2]) == [2]
    # specific { 1 } on an edge device: the twin stands in for version 1.
    assert QUANTIZED.served_versions([1], available=[1, 2]) == [2]


def test_both_picked_or_neither_is_left_to_the_policy() -> None:
    assert QUANTIZED.served_versions([1, 2], available=[1, 2]) == [1, 2]
    assert QUANTIZED.served_versions([3], available=[1, 2, 3]) == [3]


def test_a_missing_preferred_folder_keeps_what_the_policy_picked() -> None:
    assert QUANTIZED.served_versions([1], available=[1]) == [1]


def test_unversioned_requests_go_to_the_preferred_one() -> None:
    assert QUANTIZED.answering(newest=2, ready=[1, 2]) == 2
    assert FULL_PRECISION.answering(newest=2, ready=[1, 2]) == 1
    # The preferred one is not ready: the newest answers rather than nobody.
    assert FULL_PRECISION.answering(newest=2, ready=[2]) == 2
    # A newer fp32 export than the pair answers as usual.
    assert FULL_PRECISION.answering(newest=3, ready=[1, 2, 3]) == 3
