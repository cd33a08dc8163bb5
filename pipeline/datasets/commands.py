"""CLI commands of the datasets area (build, versions, show, diff, contains, export, gc)."""

import typer


def register(app: typer.Typer) -> None:
    """Add this area's commands to the ``laketrain`` app."""
