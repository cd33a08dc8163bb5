"""The ``laketrain`` entry point (``python -m pipeline.cli``, the ``laketrain`` script).

`laketrain scan` of an unchanged lake is mostly start-up, and typer with click was ~80 ms of
it, so :func:`main` runs ``laketrain scan [DATASET] [--json] [--wait/--no-wait]`` itself
(pipeline/scan_command.py) and hands every other command line -- ``--help``, an unknown
option, any other command -- to the typer app in pipeline/cli_app.py, which has the same
``scan`` command for help and for in-process callers. ``from pipeline.cli import app`` still
works: the names of pipeline/cli_app.py are read through from here on first use.
"""

from __future__ import annotations

import sys
from typing import Any


def lean_scan_args(argv: list[str]) -> tuple[str | None, bool, bool] | None:
    """(dataset, as_json, wait) when ``argv`` is a plain `scan` command line, else None (typer
    parses it: help, an unknown option, ``--``, two datasets)."""
    if not argv or argv[0] != "scan":
        return None
    dataset, as_json, wait = None, False, True
    for arg in argv[1:]:
        if arg == "--json":
            as_json = True
        elif arg in ("--wait", "--no-wait"):
            wait = arg == "--wait"
        elif arg.startswith("-") or dataset is not None:
            return None
        else:
            dataset = arg
    return dataset, as_json, wait


def main() -> None:
    from pipeline.scan_command import fail
    from pipeline.settings import SettingsError, get_settings

    argv = sys.argv[1:]
    try:
        get_settings()
    except SettingsError as exc:
        raise SystemExit(fail(str(exc), 2)) from None
    scan_args = lean_scan_args(argv)
    if scan_args is None:
        from pipeline.cli_app import app

        app()
        return
    raise SystemExit(_scan(argv, *scan_args))


def _scan(argv: list[str], dataset: str | None, as_json: bool, wait: bool) -> int:
    """`laketrain scan`, with the exits the typer app gives: a store failure is one line and
    exit 1, Ctrl-C is "Aborted." and exit 1, a closed pipe exit 1 without a traceback."""
    from pipeline.scan_command import fail, run_scan

    try:
        return run_scan(dataset, as_json=as_json, wait=wait)
    except KeyboardInterrupt:
        sys.stderr.write("\nAborted.\n")
        return 1
    except BrokenPipeError:
        # What is left unflushed goes nowhere, not into a second error at exit (Python's advice).
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except Exception as exc:
        from pipeline.cli_errors import store_error_message

        message = store_error_message(exc, argv)
        if message is None:
            raise
        return fail(message, 1)


def __getattr__(name: str) -> Any:
    # PEP 562: ``from pipeline.cli import app`` (tests, docs) loads the typer app on demand.
    if name.startswith("__"):
        raise AttributeError(name)
    from pipeline import cli_app

    try:
        return getattr(cli_app, name)
    except AttributeError:
        raise AttributeError(f"module 'pipeline.cli' has no attribute {name!r}") from None


if __name__ == "__main__":
    main()
