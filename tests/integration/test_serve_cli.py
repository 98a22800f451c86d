"""What ``conch`` tells a newcomer on its own: ``serve --help`` describes every flag, ``conch docs`` finds
the guides wherever conch is installed, and ``--log-level`` / ``--log-verbose`` take Python's and
Triton's words.

The commands run as a user runs them: the installed ``conch`` console script, from a folder that is
not the source tree.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from conch.cli.main import build_parser
from tests.integration.server_process import ServerProcess

CONCH = Path(sys.executable).with_name("conch")


def conch(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CONCH), *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env={**os.environ, "COLUMNS": "100"},
    )


def option_descriptions(help_text: str) -> dict[str, str]:
    """Each option of an argparse ``--help`` with its description, minus the ``(CONCH_X, default Y)``
    that ``_setting`` adds to every flag whether or not it was given a help text."""
    section = help_text.split("\noptions:\n", 1)[1]
    entries: list[list[str]] = []
    for line in section.splitlines():
        if re.match(r"^  -", line):
            entries.append([line])
        elif entries and line.startswith("   "):
            entries[-1].append(line)
    described = {}
    for lines in entries:
        invocation, _, first = lines[0].strip().partition("  ")
        text = " ".join(part.strip() for part in [first, *lines[1:]])
        text = re.sub(r"\s*\(CONCH_[A-Z_]+, default [^)]*\)$", "", text.strip())
        names = [word.rstrip(",") for word in invocation.split() if word.startswith("-")]
        described[names[-1]] = text
    return described


def test_every_serve_flag_says_what_it_does(tmp_path: Path) -> None:
    done = conch("serve", "--help", cwd=tmp_path)
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    serve = commands.choices["serve"]
    shown = [action for action in serve._actions if action.help != argparse.SUPPRESS]  # hidden: deprecated
    flags = {name for action in shown for name in action.option_strings if name.startswith("--")}

    described = option_descriptions(done.stdout)

    assert done.returncode == 0
    assert set(described) == flags
    empty = [flag for flag, text in described.items() if len(re.findall(r"[a-zA-Z]+", text)) < 3]
    assert empty == []


def test_serve_help_describes_the_command(tmp_path: Path) -> None:
    done = conch("serve", "--help", cwd=tmp_path)
    description = " ".join(done.stdout.split("\npositional arguments:")[0].split("\n\n", 1)[1].split())

    assert "HTTP/REST on --http-port (8000)" in description
    assert "gRPC on --grpc-port (8001)" in description
    assert "metrics on --metrics-port (8002)" in description
    assert "CONCH_* environment variable" in description
    assert "a flag wins over its variable" in description


def test_log_level_help_lists_the_accepted_values(tmp_path: Path) -> None:
    described = option_descriptions(conch("serve", "--help", cwd=tmp_path).stdout)

    assert "debug, info, warning, error, critical" in described["--log-level"]
    assert "verbose is debug" in described["--log-level"]


def test_help_points_to_conch_docs_not_to_source_paths(tmp_path: Path) -> None:
    texts = [conch(*command, "--help", cwd=tmp_path).stdout for command in (["serve"], ["validate"])]
    topics = set(re.findall(r"conch docs (\w[\w-]*)", " ".join(" ".join(t.split()) for t in texts)))
    listed = conch("docs", cwd=tmp_path).stdout

    assert not any("docs/" in text for text in texts)
    assert {"tuning", "validation"} <= topics
    for topic in topics:
        assert re.search(rf"^  {re.escape(topic)} ", listed, re.M), topic


def test_conch_docs_prints_the_folder_that_holds_the_guides(tmp_path: Path) -> None:
    done = conch("docs", cwd=tmp_path)
    folder = Path(re.search(r"^conch's guides are Markdown files in (.+)$", done.stdout, re.M).group(1))  # type: ignore[union-attr]
    listed = re.findall(r"^  (\S+)  ", done.stdout, re.M)

    assert done.returncode == 0
    assert (folder / "tuning.md").is_file()
    assert (folder / "configuration.md").is_file()
    assert sorted(listed) == sorted(path.stem for path in folder.glob("*.md"))


def test_conch_docs_topic_prints_that_guide(tmp_path: Path) -> None:
    folder = Path(re.search(r" in (.+)$", conch("docs", cwd=tmp_path).stdout, re.M).group(1))  # type: ignore[union-attr]

    done = conch("docs", "tuning", cwd=tmp_path)

    assert done.returncode == 0
    assert done.stdout == (folder / "tuning.md").read_text(encoding="utf-8")
    assert done.stdout.startswith("# Tuning")


def test_conch_docs_unknown_topic_names_the_closest(tmp_path: Path) -> None:
    done = conch("docs", "tunning", cwd=tmp_path)

    assert done.returncode == 2
    assert "conch docs: no topic 'tunning'; did you mean 'tuning'?" in done.stderr
    assert "topics: " in done.stderr
    assert done.stdout == ""


DEBUG_LINE = "DEBUG conch.runtime.model_process: serve settings: ServeSettings("
INFO_LINE = "INFO conch.runtime.model_process: loading model repository"
EMPTY_WARNING = "WARNING conch.lifecycle.model_control: model repository"


@pytest.mark.parametrize(
    ("args", "env", "debug"),
    [
        (["--log-level", "INFO"], {}, False),
        (["--log-level", "verbose"], {}, True),
        (["--log-level", "Debug"], {}, True),
        (["--log-level", "error", "--log-verbose", "1"], {}, True),
        ([], {"CONCH_LOG_VERBOSE": "2"}, True),
    ],
    ids=["info", "verbose-is-debug", "any-case", "log-verbose-wins", "conch-log-verbose"],
)
def test_log_level_and_log_verbose_set_the_detail(
    start_server: Callable[..., ServerProcess],
    tmp_path: Path,
    args: list[str],
    env: dict[str, str],
    debug: bool,
) -> None:
    served = start_server(tmp_path, *args, env=env)

    assert (DEBUG_LINE in served.log()) is debug
    assert INFO_LINE in served.log()


def test_conch_log_level_warning_keeps_only_warnings(
    start_server: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    served = start_server(tmp_path, env={"CONCH_LOG_LEVEL": "WARNING"})

    assert EMPTY_WARNING in served.log()
    assert INFO_LINE not in served.log()
    assert DEBUG_LINE not in served.log()
