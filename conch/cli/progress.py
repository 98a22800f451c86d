"""Progress and summaries for the long commands: export, validate, package, install, deploy, the benchmarks.

Why one module: each of those commands does work that takes seconds to minutes (a conversion, a
determinism run, hashing a package, a benchmark round) and used to print its own kind of line. Here
the same rule holds for all of them:

- On a terminal, the work shows as a ``rich`` progress bar on stderr (the step under way, how many of
  how many, the time taken), and a summary as a ``rich`` table on stdout.
- When stderr is not a terminal (CI logs, a pipe, the tests), each step is one plain line
  (``prefix + text + suffix``), and a summary is aligned plain text: logs stay greppable and free of
  escape codes, and the lines the CLI tests assert on stay as they were.

Progress goes to stderr and summaries to stdout, so ``conch validate --json > out.json`` keeps stdout
for the document. ``FORCE_COLOR`` and ``TTY_COMPATIBLE`` force either way, as ``rich`` reads them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from types import TracebackType

from rich import progress as rich_progress
from rich.console import Console
from rich.markup import escape
from rich.table import Table


def stderr_console() -> Console:
    """The console progress goes to; it finds ``sys.stderr`` when it writes, so redirection works."""
    return Console(stderr=True, highlight=False)


def stdout_console() -> Console:
    """The console summaries go to."""
    return Console(highlight=False)


class Steps:
    """The steps of one long piece of work: a bar on a terminal, one plain line per step otherwise.

    ``total`` is how many units the work has (models to validate, benchmark points), or ``None`` when
    that is not known up front (the bar then shows a spinner and the steps seen so far). ``step``
    says what starts now; ``advance`` says that units are done. Use it as a context manager: the bar
    is drawn between ``__enter__`` and ``__exit__`` and stays on screen when the work ends.
    """

    def __init__(
        self,
        total: int | None = None,
        *,
        prefix: str = "",
        suffix: str = "",
        label: str | None = None,
        console: Console | None = None,
    ) -> None:
        self.console = console if console is not None else stderr_console()
        self.total = total
        #: What the bar says before the first step and once the work is done ("conch validate").
        self.label = label if label is not None else prefix.rstrip(": ")
        self.prefix = prefix
        self.suffix = suffix
        self.completed = 0
        self._bar: rich_progress.Progress | None = None
        self._task: rich_progress.TaskID | None = None

    @property
    def on_terminal(self) -> bool:
        return self.console.is_terminal

    def __enter__(self) -> Steps:
        if self.on_terminal:
            columns: list[str | rich_progress.ProgressColumn] = [
                rich_progress.SpinnerColumn(finished_text="[green]✓[/]"),
                rich_progress.TextColumn("{task.description}"),
                rich_progress.BarColumn(),
            ]
            if self.total is not None:
                columns.append(rich_progress.MofNCompleteColumn())
            columns.append(rich_progress.TimeElapsedColumn())
            self._bar = rich_progress.Progress(*columns, console=self.console)
            self._task = self._bar.add_task(escape(self.label), total=self.total)
            self._bar.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._bar is None or self._task is None:
            return
        if kind is None:
            # The work ended well: the bar shows it whole, whatever the estimate of units was.
            done = self.total if self.total is not None else max(self.completed, 1)
            label = escape(self.label) or "done"
            self._bar.update(self._task, total=done, completed=done, description=label)
        self._bar.stop()
        self._bar = None

    def step(self, text: str, plain: bool = True) -> None:
        """``text`` is what starts now ("digits-mlp 1: determinism").

        ``plain=False``: only the bar shows it, for work whose result line (a :meth:`note`) says it.
        """
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, description=escape(text))
        elif plain:
            print(f"{self.prefix}{text}{self.suffix}", file=self.console.file, flush=True)

    def advance(self, units: int = 1) -> None:
        """``units`` more of ``total`` are done (plain output prints nothing for it)."""
        self.completed += units
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, completed=self.completed)

    def note(self, text: str) -> None:
        """A line that stays (a warning, a result), printed above the bar on a terminal."""
        if self._bar is not None:
            self._bar.console.print(escape(text), highlight=False)
        else:
            print(text, file=self.console.file, flush=True)


class StepsFromLog(logging.Handler):
    """Turns a library's ``log.info`` lines into steps, so a library reports progress without a CLI."""

    def __init__(self, steps: Steps) -> None:
        super().__init__(logging.INFO)
        self.steps = steps

    def emit(self, record: logging.LogRecord) -> None:
        self.steps.step(record.getMessage())


def plain_table(columns: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """Columns aligned with two spaces between them; the last column is not padded."""
    cells = [list(columns), *([str(cell) for cell in row] for row in rows)]
    widths = [max(len(row[index]) for row in cells) for index in range(len(columns))]
    lines = ("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)) for row in cells)
    return "\n".join(line.rstrip() for line in lines)


def print_table(
    columns: Sequence[str],
    rows: Iterable[Sequence[object]],
    *,
    title: str | None = None,
    console: Console | None = None,
) -> None:
    """A summary: a ``rich`` table on a terminal, :func:`plain_table` (under ``title``) otherwise."""
    console = console if console is not None else stdout_console()
    rows = [list(row) for row in rows]
    if not console.is_terminal:
        text = plain_table(columns, rows)
        print(f"{title}\n{text}" if title else text, file=console.file, flush=True)
        return
    if title:  # above the table, not its caption: a caption wraps at the table's width
        console.print(escape(title), style="bold", soft_wrap=True)
    table = Table(header_style="bold")
    for column in columns:
        table.add_column(escape(column), overflow="fold")  # a long path wraps, never cut short
    for row in rows:
        table.add_row(*(escape(str(cell)) for cell in row))
    console.print(table)


def print_summary(
    plain: Sequence[str],
    columns: Sequence[str],
    rows: Iterable[Sequence[object]],
    *,
    title: str | None = None,
    console: Console | None = None,
) -> None:
    """A command's result: a ``rich`` table on a terminal, the ``plain`` lines otherwise.

    The plain lines are what scripts and the CLI tests read, so they stay as each command wrote them.
    """
    console = console if console is not None else stdout_console()
    if console.is_terminal:
        print_table(columns, rows, title=title, console=console)
    else:
        print("\n".join(plain), file=console.file, flush=True)
