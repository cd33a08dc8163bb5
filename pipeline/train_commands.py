"""The ``laketrain train`` command. It lives on the data side so that the Airflow image, which
carries no ``training/`` package and no torch, still has it for user commands and images; the
built-in trainer is imported only when it runs."""

import typer


def register(app: typer.Typer) -> None:
    """Add this area's commands to the ``laketrain`` app."""

    @app.command(
        "train",
        context_settings={
            "allow_extra_args": True,
            "ignore_unknown_options": True,
            "help_option_names": [],
        },
        add_help_option=False,
    )
    def train(ctx: typer.Context) -> None:
        """Train on a dataset version: the same entry as `python -m training` (flags override
        the TRAIN_* / DATASET_* environment). `laketrain train --help` lists every flag.
        With `--command "…"` (or `--image IMAGE`) it runs your own trainer instead, with the
        same environment contract, and records the run (docs/trainer-contract.md)."""
        from pipeline.orchestration.user_run import wants_user_command

        if wants_user_command(ctx.args):
            from pipeline.orchestration.user_run import run

            raise typer.Exit(run(list(ctx.args)))
        try:
            from training.__main__ import main
        except ModuleNotFoundError as exc:
            if exc.name not in ("training", "torch"):
                raise
            typer.echo(
                "error: the built-in trainer is not installed here (pip install 'laketrain"
                "[training]'); a command of your own runs with `laketrain train --command ...`",
                err=True,
            )
            raise typer.Exit(2) from None
        raise typer.Exit(main(list(ctx.args)))
