"""The Python backend's pure rules: restart backoff, ``--backend-config`` entries, error codes."""

from __future__ import annotations

import pytest

from conch.backends.python import codes, restarts
from conch.backends.python.backend_config import parse_backend_setting, shared_memory_sizes
from conch.core.errors import InternalError, InvalidArgumentError, NotFoundError, UnavailableError


def test_restart_delays_double_and_reset_after_a_stable_run() -> None:
    policy = restarts.RestartPolicy()
    assert policy.delay_after_death(served_for_s=1) == restarts.FIRST_DELAY_S
    assert policy.delay_after_death(served_for_s=1) == 2 * restarts.FIRST_DELAY_S
    assert policy.delay_after_death(served_for_s=1) == 4 * restarts.FIRST_DELAY_S
    assert policy.delay_after_death(served_for_s=restarts.STABLE_AFTER_S) == restarts.FIRST_DELAY_S


def test_restart_delays_are_capped() -> None:
    policy = restarts.RestartPolicy(failures_in_a_row=20)
    assert policy.delay_after_death(served_for_s=0) == restarts.MAX_DELAY_S


def test_failed_starts_give_up_after_the_limit() -> None:
    policy = restarts.RestartPolicy()
    policy.delay_after_death(served_for_s=0)
    delays = []
    while (delay := policy.start_failed()) is not None:
        delays.append(delay)
    assert len(delays) == restarts.GIVE_UP_AFTER - 1
    assert delays == sorted(delays)


def test_backend_setting_parses_and_the_last_entry_wins() -> None:
    first = parse_backend_setting("python,shm-default-byte-size=8192")
    second = parse_backend_setting("python,shm-default-byte-size=16384")
    growth = parse_backend_setting("python,shm-growth-byte-size=4096")
    assert shared_memory_sizes((first, second, growth)) == {
        "shm-default-byte-size": 16384,
        "shm-growth-byte-size": 4096,
    }


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("python", "is not <backend>,<key>=<value>"),
        ("onnxruntime,shm-default-byte-size=8192", "python backend only"),
        ("python,shm-region-prefix-name=x", "has no setting"),
        ("python,shm-default-byte-size=lots", "number of bytes"),
        ("python,shm-default-byte-size=1", "at least 4096"),
    ],
)
def test_bad_backend_settings_say_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_backend_setting(text)


def test_triton_codes_map_to_statuses_both_ways() -> None:
    assert isinstance(codes.error_of_code("x", codes.INVALID_ARG), InvalidArgumentError)
    assert isinstance(codes.error_of_code("x", codes.NOT_FOUND), NotFoundError)
    assert isinstance(codes.error_of_code("x", codes.UNAVAILABLE), UnavailableError)
    assert isinstance(codes.error_of_code("x", 6), InternalError)  # ALREADY_EXISTS: a 500
    assert codes.code_of_error(NotFoundError("x")) == codes.NOT_FOUND
    assert codes.code_of_error(InternalError("x")) == codes.INTERNAL
