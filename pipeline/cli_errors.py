"""A metadata-store failure under any `laketrain` command, as one line: shared by the typer
app (pipeline/cli_app.py) and the lean `laketrain scan` entry (pipeline/cli.py), so it imports
neither typer nor, until an error is being explained, SQLAlchemy."""

from __future__ import annotations

import shlex


def store_error_message(exc: BaseException, argv: list[str]) -> str | None:
    """One line for a metadata-store failure (password masked), or None for other errors."""
    from sqlalchemy.exc import DBAPIError

    from pipeline.metadata.fastpath import StoreVersionError
    from pipeline.metadata.store import StoreBusyError, StoreUnavailable
    from pipeline.redact import redact_text, redact_url
    from pipeline.settings import get_settings

    retry = f"retry `{shlex.join(['laketrain', *argv])}`"
    if isinstance(exc, StoreVersionError):
        return str(exc)
    if isinstance(exc, StoreUnavailable):
        return f"{exc}. Nothing was half-published; {retry} once the store is reachable."
    if isinstance(exc, StoreBusyError):
        return f"{exc}; {retry} when the other writer has finished."
    if isinstance(exc, DBAPIError):
        lines = str(exc.orig).strip().splitlines() or [type(exc.orig).__name__]
        return (
            f"metadata store {redact_url(get_settings().database_url)} failed: "
            f"{redact_text(lines[0])}; the transaction was rolled back; {retry}."
        )
    return None
