"""The ``laketrain`` typer app. Each area registers its own commands; this module only wires
them together and turns known errors into a clean message and exit code.

The process starts in pipeline/cli.py, which runs `laketrain scan` itself and imports this
module (typer, click) for every other command. Nothing heavy is imported here at module level
either: rich is loaded when something is printed (pipeline/console.py, shared with every area's
commands), SQLAlchemy, Alembic and each command's own modules inside the command.
"""

from __future__ import annotations

from typing import Annotated, Any

import click
import typer
from typer.core import TyperGroup

from pipeline.cli_errors import store_error_message
from pipeline.console import err, fail, out, print_json
from pipeline.console import table as make_table
from pipeline.settings import SettingsError, get_settings


class _LaketrainGroup(TyperGroup):
    """The top-level command group: a store outage under ANY command becomes one line on
    stderr and exit 1, instead of a page of traceback."""

    def make_context(self, info_name: str | None, args: list[str], parent=None, **extra: Any):
        argv = list(args)  # before click consumes them: the command line to retry
        ctx = super().make_context(info_name, args, parent=parent, **extra)
        ctx.meta["laketrain.argv"] = argv
        return ctx

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except Exception as exc:
            message = store_error_message(exc, ctx.meta.get("laketrain.argv") or [])
            if message is None:
                raise
            fail(message, code=1)


_APP_OPTIONS: dict[str, Any] = {
    "name": "laketrain",
    "help": "Versioned datasets from a data lake, and training on them.",
    "no_args_is_help": True,
    "cls": _LaketrainGroup,
}
if "pretty_exit_codes" in typer.Typer.__init__.__code__.co_varnames:
    _APP_OPTIONS["pretty_exit_codes"] = False
app = typer.Typer(**_APP_OPTIONS)
db_app = typer.Typer(help="The metadata store.", no_args_is_help=True)
app.add_typer(db_app, name="db")


@db_app.command("upgrade")
def db_upgrade(revision: str = "head") -> None:
    """Apply the metadata-store migrations."""
    from pipeline.metadata.store import current_revision, make_engine, upgrade

    url = get_settings().database_url
    engine = make_engine(url)
    upgrade(engine, revision)
    out().print(f"metadata store at revision [bold]{current_revision(engine)}[/]")


@db_app.command("current")
def db_current() -> None:
    """Print the metadata store's migration revision."""
    from pipeline.metadata.store import current_revision, make_engine

    out().print(current_revision(make_engine(get_settings().database_url)) or "(empty)")


@app.command("sample-lake")
def sample_lake(
    force: Annotated[
        bool, typer.Option(help="Write the samples even if the lake has files.")
    ] = False,
) -> None:
    """Create the sample lake (digits PNGs, sample photos) when the lake is empty."""
    from pipeline.lake.sample_lake import create_sample_lake

    lake = get_settings().lake_dir
    try:
        written = create_sample_lake(lake, force=force)
    except ValueError as exc:  # an s3:// lake: laketrain does not write to it
        fail(str(exc))
    if written:
        out().print(
            f"sample lake written to {lake}: "
            + ", ".join(f"{k} {v} files" for k, v in written.items())
        )
    else:
        out().print(f"lake {lake} already has data; nothing written")


@app.command("scan")
def scan_cmd(
    dataset: Annotated[str | None, typer.Argument(help="Scan one dataset folder only.")] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the full change set as JSON.")
    ] = False,
    wait: Annotated[
        bool, typer.Option(help="Wait for a running scan of the lake to finish.")
    ] = True,
) -> None:
    """Walk the lake, hash new or changed files, and record them in the ledger."""
    from pipeline.scan_command import run_scan

    code = run_scan(dataset, as_json=as_json, wait=wait)
    if code:
        raise typer.Exit(code)


@app.command("files")
def files_cmd(
    path: Annotated[
        str | None,
        typer.Option("--path", help="Glob on the lake-relative path, e.g. 'digits/3/*'."),
    ] = None,
    md5: Annotated[str | None, typer.Option("--md5", help="MD5 prefix.")] = None,
    status: Annotated[
        str | None, typer.Option("--status", help="ok, unreadable, invalid, refused or deleted.")
    ] = None,
    limit: Annotated[int, typer.Option(help="At most this many rows.")] = 1000,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """List ledger rows."""
    from pipeline.lake.ledger_query import list_files

    try:
        rows = list_files(path_glob=path, md5_prefix=md5, status=status, limit=limit)
    except ValueError as exc:
        fail(str(exc))
    if as_json:
        print_json(rows)
        return
    table = make_table(
        f"{len(rows)} ledger rows", "path", "size", "md5", "status", "last_seen", "error"
    )
    for row in rows:
        table.add_row(
            row["path"],
            str(row["size"] if row["size"] is not None else ""),
            row["md5"] or "",
            row["status"],
            str(row["last_seen"])[:19],
            row["error"] or "",
        )
    out().print(table)


def _register_areas() -> None:
    # Each area owns its commands module; importing one never pulls torch or Airflow.
    from pipeline import runs_commands
    from pipeline import train_commands as training_commands
    from pipeline.datasets import commands as dataset_commands

    dataset_commands.register(app)
    training_commands.register(app)
    runs_commands.register(app)


def main() -> None:
    """Every command through typer (pipeline/cli.py's main runs `laketrain scan` itself)."""
    try:
        get_settings()
    except SettingsError as exc:
        err().print(f"[bold red]error:[/] {exc}", highlight=False)
        raise SystemExit(2) from None
    app()


_register_areas()
