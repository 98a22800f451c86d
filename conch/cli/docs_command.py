"""``conch docs [TOPIC]``: the guides, wherever conch is installed.

The Markdown files of the source tree's ``docs/`` ship inside the package as ``conch.docs`` (mapped in
``pyproject.toml``, as ``conch.examples`` is), so help texts can say ``conch docs tuning`` to someone who
installed conch with pip and has no ``docs/`` folder. With no topic the command prints where the files
are and one line per topic; with a topic it prints that guide to stdout, ready for a pager.
"""

from __future__ import annotations

import argparse
import os
import sys
from importlib import resources
from pathlib import Path
from typing import Any

from conch.core.errors import did_you_mean


def add_parser(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "docs",
        help="print where conch's guides are and their topics, or one guide (conch docs tuning)",
        description="Without a topic: the folder holding conch's Markdown guides, and the topics. With a "
        "topic (a file name without .md): that guide, on stdout. Exit 2 for an unknown topic.",
    )
    parser.add_argument("topic", nargs="?", default="", help="a guide to print, such as tuning")
    parser.set_defaults(run=run)


def guides() -> dict[str, Path]:
    """Each guide by topic (``tuning`` -> ``.../tuning.md``).

    ``conch.docs`` has no ``__init__.py`` (a namespace package), so ``importlib.resources`` reaches it in
    a wheel; a source checkout installed before the mapping existed falls back to ``docs/`` beside
    the package, as :func:`conch.repository.embedded.embedded_repository` does for the examples.
    """
    try:
        entries = [Path(str(entry)) for entry in resources.files("conch.docs").iterdir()]
    except ModuleNotFoundError:
        source = Path(__file__).resolve().parents[2] / "docs"
        entries = list(source.iterdir()) if source.is_dir() else []
    return {path.stem: path for path in sorted(entries) if path.suffix == ".md" and path.is_file()}


def run(args: argparse.Namespace) -> int:
    try:
        return _print(args.topic)
    except BrokenPipeError:
        # ``conch docs tuning | head``: the reader had enough, which is no failure. Point stdout at
        # /dev/null so that the interpreter's last flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _print(wanted: str) -> int:
    found = guides()
    if not found:
        print("conch docs: this installation has no guides (conch.docs is missing)", file=sys.stderr)
        return 1
    if wanted:
        topic = wanted.removesuffix(".md")
        if topic not in found:
            print(f"conch docs: no topic '{wanted}'{did_you_mean(topic, found)}", file=sys.stderr)
            print(f"topics: {', '.join(found)}", file=sys.stderr)
            return 2
        sys.stdout.write(found[topic].read_text(encoding="utf-8"))
        sys.stdout.flush()
        return 0
    folder = next(iter(found.values())).parent
    print(f"conch's guides are Markdown files in {folder}")
    print("conch docs TOPIC prints one:")
    width = max(len(topic) for topic in found)
    for topic, path in found.items():
        print(f"  {topic.ljust(width)}  {_title(path)}")
    sys.stdout.flush()
    return 0


def _title(path: Path) -> str:
    """The guide's first heading, without its ``#``."""
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            return line.lstrip("#").strip()
    return ""
