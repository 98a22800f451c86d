"""streams.yaml: defaults, the credentials' sources, and each mistake refused with its fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from conch.streams.config import DEFAULT_MAX_DELIVERIES, DEFAULT_MAXLEN, load_streams_config

STREAM = "streams:\n  - {model: fraud, input: fraud-in, results: fraud-out, dead_letter: fraud-dlq}\n"


def _config(tmp_path: Path, text: str, environ: dict[str, str] | None = None) -> object:
    path = tmp_path / "streams.yaml"
    path.write_text(text)
    return load_streams_config(path, environ or {})


def test_the_issue_example_reads_with_its_defaults(tmp_path: Path) -> None:
    config = _config(tmp_path, "broker: redis://127.0.0.1:6379/0\n" + STREAM)
    assert config.streams[0].group == "conch"  # type: ignore[attr-defined]
    assert config.max_deliveries == DEFAULT_MAX_DELIVERIES  # type: ignore[attr-defined]
    assert config.maxlen == DEFAULT_MAXLEN  # type: ignore[attr-defined]
    assert config.broker_address == "redis://127.0.0.1:6379"  # type: ignore[attr-defined]


def test_the_password_comes_from_a_variable_or_a_file_and_never_shows(tmp_path: Path) -> None:
    from_env = _config(
        tmp_path,
        "broker: rediss://cache:6380/0\npassword_env: REDIS_PASSWORD\n" + STREAM,
        {"REDIS_PASSWORD": "hunter2"},
    )
    assert from_env.password == "hunter2"  # type: ignore[attr-defined]
    assert "hunter2" not in repr(from_env)
    secret = tmp_path / "secret"
    secret.write_text("s3cret\n")
    from_file = _config(tmp_path, f"broker: redis://cache/0\npassword_file: {secret}\n" + STREAM)
    assert from_file.password == "s3cret"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("broker: redis://:hunter2@cache:6379/0\n" + STREAM, "password_env"),
        ("broker: http://cache/0\n" + STREAM, "redis:// or rediss://"),
        ("broker: redis://cache/0\nstreams: []\n", "one entry per model"),
        ("broker: redis://cache/0\nstreams:\n  - {model: fraud, input: in}\n", "['results', 'dead_letter']"),
        ("broker: redis://cache/0\nmaxlen: 0\n" + STREAM, "'maxlen' must be a whole number above 0"),
        ("broker: redis://cache/0\nmax_delivery: 3\n" + STREAM, "unknown key(s) ['max_delivery']"),
        ("broker: redis://cache/0\npassword_env: NOT_SET\n" + STREAM, "NOT_SET, which is not set"),
        (
            "broker: redis://cache/0\nstreams:\n  - {model: m, input: a, results: a, dead_letter: b}\n",
            "must differ",
        ),
    ],
)
def test_mistakes_are_refused_with_the_fix(tmp_path: Path, text: str, words: str) -> None:
    with pytest.raises(ValueError) as refused:
        _config(tmp_path, text)
    assert words in str(refused.value)
    assert "hunter2" not in str(refused.value)
