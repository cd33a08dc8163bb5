"""CLI commands of the training area (``laketrain train``). Imports torch only when run."""

import typer


def register(app: typer.Typer) -> None:
    """Add this area's commands to the ``laketrain`` app."""
