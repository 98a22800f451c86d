"""conch/cli/progress.py: plain lines off a terminal, a rich bar and table on one."""

from __future__ import annotations

import io
import logging

import pytest
from rich.console import Console

from conch.cli.progress import Steps, StepsFromLog, plain_table, print_table


def _terminal(buffer: io.StringIO) -> Console:
    return Console(file=buffer, force_terminal=True, width=100)


def _plain(buffer: io.StringIO) -> Console:
    return Console(file=buffer, force_terminal=False, width=100)


def test_off_a_terminal_each_step_is_one_plain_line() -> None:
    buffer = io.StringIO()
    with Steps(2, prefix="conch validate: ", suffix="…", console=_plain(buffer)) as steps:
        steps.step("digits-mlp 1: determinism")
        steps.advance()
        steps.note("a warning that stays")
        steps.step("iris 1: [bold]batch invariance[/]")
        steps.advance()
    assert buffer.getvalue().splitlines() == [
        "conch validate: digits-mlp 1: determinism…",
        "a warning that stays",
        "conch validate: iris 1: [bold]batch invariance[/]…",
    ]
    assert "\x1b" not in buffer.getvalue()


def test_on_a_terminal_a_bar_counts_the_units_and_ends_whole() -> None:
    buffer = io.StringIO()
    with Steps(3, prefix="conch validate: ", console=_terminal(buffer)) as steps:
        steps.step("digits-mlp 1: determinism")
        steps.advance()
    out = buffer.getvalue()
    assert "\x1b[" in out  # escape codes: a live bar, not lines
    assert "3/3" in out  # a finished piece of work shows whole
    assert "conch validate" in out
    assert "conch validate: digits-mlp" not in out  # no plain line on a terminal


def test_on_a_terminal_a_failure_leaves_the_bar_where_it_stopped() -> None:
    buffer = io.StringIO()
    with pytest.raises(RuntimeError), Steps(4, console=_terminal(buffer)) as steps:
        steps.advance()
        raise RuntimeError("conversion failed")
    assert "1/4" in buffer.getvalue() and "4/4" not in buffer.getvalue()


def test_model_provided_text_is_not_read_as_markup_on_a_terminal() -> None:
    buffer = io.StringIO()
    with Steps(1, console=_terminal(buffer)) as steps:
        steps.note("model [red]x[/red]")
    assert "model [red]x[/red]" in buffer.getvalue()


def test_log_lines_become_steps() -> None:
    buffer = io.StringIO()
    logger = logging.getLogger("conch.test_progress")
    logger.setLevel(logging.INFO)
    with Steps(prefix="conch export: ", console=_plain(buffer)) as steps:
        handler = StepsFromLog(steps)
        logger.addHandler(handler)
        try:
            logger.info("converting %s to ONNX", "Pipeline")
            logger.debug("not a step")
        finally:
            logger.removeHandler(handler)
    assert buffer.getvalue() == "conch export: converting Pipeline to ONNX\n"


def test_plain_table_aligns_columns_without_trailing_spaces() -> None:
    text = plain_table(["MODEL", "VERSION", "STATE"], [["add_sub", 1, "READY"], ["digits-mlp", 12, ""]])
    assert text.splitlines() == [
        "MODEL       VERSION  STATE",
        "add_sub     1        READY",
        "digits-mlp  12",
    ]


def test_print_table_is_rich_on_a_terminal_and_plain_otherwise() -> None:
    rich_buffer, plain_buffer = io.StringIO(), io.StringIO()
    rows = [["add_sub", "READY"]]
    print_table(["MODEL", "STATE"], rows, title="Models", console=_terminal(rich_buffer))
    print_table(["MODEL", "STATE"], rows, title="Models", console=_plain(plain_buffer))
    assert "┃" in rich_buffer.getvalue() and "add_sub" in rich_buffer.getvalue()
    assert plain_buffer.getvalue() == "Models\nMODEL    STATE\nadd_sub  READY\n"
