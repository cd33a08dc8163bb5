"""`laketrain scan`: run the scan and print it, without typer, click or pydantic.

`laketrain scan` of an unchanged lake is mostly start-up, so this module is what the lean entry
(pipeline/cli.py) runs for it, and the typer command (pipeline/cli_app.py) calls the same
function. Off a terminal (a pipe, a file, cron, the benchmark) the table is written as plain
text, byte for byte what rich writes there (tests/lake/test_scan_startup.py compares them), so
rich is not imported either; on a terminal rich draws the table and the hashing bar.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any, TextIO

SCAN_COUNTS = (
    "new",
    "changed",
    "renamed",
    "deleted",
    "touched",
    "unchanged",
    "refused",
    "unreadable",
    "settling",
)

# What makes rich treat a pipe as a terminal (colour, a live bar) or change its width;
# with any of them set, rich itself prints.
_RICH_ENV = ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "JUPYTER_COLUMNS")


def plain(stream: TextIO) -> bool:
    """Whether rich would write ``stream`` as plain UTF-8 text: not a terminal, nothing in
    the environment forcing one, and an encoding that takes the box-drawing characters."""
    if any(os.environ.get(name) for name in _RICH_ENV):
        return False
    try:
        if stream.isatty():
            return False
    except (AttributeError, ValueError):
        return False
    return (getattr(stream, "encoding", "") or "").lower().replace("-", "") == "utf8"


def _width() -> int:
    """rich's width off a terminal: COLUMNS when it is a number, else 80."""
    text = os.environ.get("COLUMNS", "")
    return int(text) if text.isdigit() else 80


def plain_table(title: str, rows: list[tuple[str, str]]) -> str | None:
    """The two-column scan table (left-aligned names, right-aligned counts, no header) as
    rich draws it off a terminal, or None where rich would shrink or wrap it."""
    left = max(len(k) for k, _ in rows)
    right = max(len(v) for _, v in rows)
    if left + right + 7 > _width():
        return None
    lines = [
        title,
        f"┌{'─' * (left + 2)}┬{'─' * (right + 2)}┐",
        *(f"│ {k.ljust(left)} │ {v.rjust(right)} │" for k, v in rows),
        f"└{'─' * (left + 2)}┴{'─' * (right + 2)}┘",
    ]
    return "\n".join(lines) + "\n"


def fail(message: str, code: int) -> int:
    """``error: <message>`` on stderr (rich's bold red on a terminal); returns ``code``."""
    if plain(sys.stderr):
        sys.stderr.write(f"error: {message}\n")
    else:
        from pipeline.console import err

        err().print(f"[bold red]error:[/] {message}", highlight=False, markup=True)
    return code


def run_scan(dataset: str | None, *, as_json: bool, wait: bool) -> int:
    """Scan the lake (or one dataset) and print the result; returns the exit code (0; 2 bad
    input or an unreachable S3 lake; 3 another scan holds the lake and ``wait`` is off).
    Metadata-store errors propagate: the caller turns them into one line and exit 1."""
    from pipeline.lake.scan import ScanBusyError, scan
    from pipeline.settings import get_settings

    settings = get_settings()
    as_text = not as_json and plain(sys.stdout)
    progress, on_total, on_progress = _hash_progress(show=not (as_json or as_text))
    try:
        with progress:
            result = scan(
                settings.lake_dir,
                dataset=dataset,
                wait=wait,
                on_total=on_total,
                on_progress=on_progress,
            )
    except ScanBusyError as exc:
        return fail(str(exc), 3)
    except (FileNotFoundError, ValueError) as exc:
        return fail(str(exc), 2)
    except RuntimeError as exc:
        # An S3 lake that stayed unreachable through the retries: one line naming the URL
        # (imported here: a scan of a folder must not load the storage layer).
        from pipeline.storage.errors import StorageError

        if not isinstance(exc, StorageError):
            raise
        return fail(str(exc), 2)
    if as_json:
        import json

        sys.stdout.write(json.dumps(result.to_json(), indent=2, default=str) + "\n")
        return 0
    summary = result.summary()
    title = f"scan {result.scan_id} of {settings.lake_dir}" + (f" / {dataset}" if dataset else "")
    rows = [(key, str(summary[key])) for key in SCAN_COUNTS]
    rate = (
        f"{result.bytes_hashed / 1e6:.1f} MB hashed in {result.seconds:.2f} s "
        f"({result.files_per_second:,.0f} files/s)"
    )
    skipped = result.refused + result.unreadable
    text = plain_table(title, rows) if as_text else None
    if text is not None:
        text += rate + "\n"
        text += "".join(f"  skipped {path}: {reason}\n" for path, reason in skipped)
        sys.stdout.write(text)
        return 0
    _print_rich(title, rows, rate, skipped)
    return 0


def _print_rich(title: str, rows: list[tuple[str, str]], rate: str, skipped: list[Any]) -> None:
    from rich.markup import escape
    from rich.table import Table

    from pipeline.console import out

    console = out()
    table = Table(title=title, show_header=False)
    table.add_column("what")
    table.add_column("files", justify="right")
    for key, count in rows:
        table.add_row(key, count)
    console.print(table)
    console.print(rate)
    for path, reason in skipped:
        line = f"  [yellow]skipped[/] {escape(str(path))}: {escape(str(reason))}"
        console.print(line, markup=True, highlight=False)


def _hash_progress(*, show: bool):  # -> (context manager, on_total, on_progress)
    """A hashing progress bar on a terminal; off one (a pipe, --json) no bar and no rich."""
    if not show:
        return contextlib.nullcontext(), None, None
    from pipeline.console import out

    if not out().is_terminal:
        return contextlib.nullcontext(), None, None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    progress = Progress("hashing", BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    task = progress.add_task("hash", total=None)
    return (
        progress,
        lambda n: progress.update(task, total=n),
        lambda n: progress.advance(task, n),
    )
