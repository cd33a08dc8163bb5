"""What the ``laketrain`` commands print, in one place: the stdout and stderr consoles, a
failure line with its exit code, JSON, plain lines and tables.

Every area's commands module and ``pipeline/cli.py`` use it; it imports none of them, so
neither needs the other to print. rich is imported when something is printed (the consoles
are made on first use): ``laketrain --help`` and a command that only prints JSON never load it.
"""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

_consoles: dict[str, Any] = {}


def _make_console(*, stderr: bool = False):  # -> rich.console.Console
    from rich.console import Console

    class _Console(Console):
        """Wraps long lines only on a terminal: a message written to a file or a pipe stays
        one line, whatever COLUMNS says, so it can be grepped and logged whole."""

        @property  # type: ignore[override]
        def soft_wrap(self) -> bool:
            return not self.is_terminal

        @soft_wrap.setter
        def soft_wrap(self, value: bool) -> None:  # Console.__init__ assigns it; ignore it
            pass

    return _Console(stderr=stderr)


def out():  # -> the stdout rich Console
    if "out" not in _consoles:
        _consoles["out"] = _make_console()
    return _consoles["out"]


def err():  # -> the stderr rich Console
    if "err" not in _consoles:
        _consoles["err"] = _make_console(stderr=True)
    return _consoles["err"]


def fail(message: str, code: int = 2) -> NoReturn:
    """``error: <message>`` on stderr, then exit ``code`` (2: bad input, by convention)."""
    import typer  # here, not at the top: the lean `laketrain scan` entry never loads typer

    err().print(f"[bold red]error:[/] {message}", highlight=False, markup=True)
    raise typer.Exit(code)


def print_json(data: object) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def say(text: str) -> None:
    """One line of plain text on stdout: no rich markup, no highlighting (paths, URLs and
    user-supplied names print as they are)."""
    out().print(text, markup=False, highlight=False)


def warn(text: str) -> None:
    """One line of plain text on stderr."""
    err().print(text, markup=False, highlight=False)


def table(title: str, *columns: str, compact: bool = False, **column_options: Any):
    """A rich Table with these columns (every column gets ``column_options``, by default
    ``overflow="fold"``). ``compact``: no box edges or padding, so that a listing of short
    ids fits 80 columns."""
    from rich import box
    from rich.table import Table

    style: dict[str, Any] = (
        {"box": box.SIMPLE_HEAD, "pad_edge": False, "collapse_padding": True, "show_edge": False}
        if compact
        else {}
    )
    t = Table(title=title, **style)
    for col in columns:
        t.add_column(col, **(column_options or {"overflow": "fold"}))
    return t


def print_whole(t: Any) -> None:
    """A table whole: on a terminal at its width; to a file or a pipe wide enough that names
    and URLs are never folded (they are grepped and copied)."""
    console = out()
    if console.is_terminal:
        console.print(t, markup=False)
        return
    saved, console.width = console.width, 250
    try:
        console.print(t, markup=False)
    finally:
        console.width = saved


def short_time(iso: str | None) -> str:
    """``MM-DD HH:MM`` of an ISO timestamp: the narrow form of a listing's time column."""
    return (iso or "")[5:16].replace("T", " ")
