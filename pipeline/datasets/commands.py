"""CLI commands of the datasets area that write: build, export, gc; and the area's ``register``.

The commands that read versions (versions, show, diff, contains) are in
``pipeline/datasets/version_commands.py`` (which shares ``known_errors`` and ``LATEST_HELP``
from here), the quality gate's in ``review_commands.py``. Heavy modules are imported inside
each command so that ``laketrain --help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pipeline.console import err, fail, out, print_json

LATEST_HELP = (
    "Dataset that 'latest' means (default: the dataset of the other version, "
    "or the only dataset with versions)."
)


def known_errors() -> tuple[type[BaseException], ...]:
    from pipeline.datasets.manifest import ManifestError, VersionNotFound
    from pipeline.datasets.recipes import RecipeError

    return (
        VersionNotFound,
        ManifestError,
        RecipeError,
        FileExistsError,
        FileNotFoundError,
        ValueError,
    )


def build_cmd(
    dataset: Annotated[str, typer.Argument(help="The lake folder to build.")],
    workers: Annotated[
        int | None, typer.Option(help="Processes that decode shards (default: HASH_WORKERS).")
    ] = None,
    max_files: Annotated[
        int | None, typer.Option(help="Files per shard (default: SHARD_FILES).")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the build report as JSON.")
    ] = False,
    wait: Annotated[
        bool, typer.Option(help="Wait for a running build of the dataset to finish.")
    ] = True,
) -> None:
    """Scan DATASET, decode what is new, and publish a version (or report no change)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    from pipeline.datasets.build import BuildError, run_build
    from pipeline.datasets.buildlock import BuildBusyError
    from pipeline.lake.scan import ScanBusyError

    show_bar = out().is_terminal and not as_json
    progress = Progress(
        "decoding",
        BarColumn(),
        MofNCompleteColumn(),
        "files",
        TimeRemainingColumn(),
        disable=not show_bar,
    )
    task = progress.add_task("decode", total=None)
    try:
        with progress:
            report = run_build(
                dataset,
                workers=workers,
                max_files=max_files,
                on_plan=lambda shards: progress.update(
                    task, total=sum(len(s.files) for s in shards)
                ),
                on_shard=lambda ref: progress.advance(task, ref.n_files),
                wait=wait,
                on_wait=lambda message: err().print(message, markup=False, highlight=False),
            )
    except (BuildBusyError, ScanBusyError) as exc:
        fail(str(exc), code=3)  # like `laketrain scan --no-wait`
    except BuildError as exc:
        fail(str(exc), code=1)
    except known_errors() as exc:
        fail(str(exc))
    if as_json:
        print_json(report.to_dict())
        return
    v = report.version
    out().print(
        f"{report.shards} shard(s), {report.decoded} file(s) decoded, {report.invalid} invalid, "
        f"{report.reused_segments} segment(s) reused",
        highlight=False,
    )
    if v is None:
        out().print(f"no change: [bold]{dataset}[/] is up to date")
        return
    if v.head_move == "returned":  # an older version's content again: nothing new published
        out().print(
            f"head moved back to [bold green]{v.tag}[/] ({v.version_id[:12]}): {v.samples} "
            f"samples (train {v.train} / val {v.val}); the lake holds its content again",
            highlight=False,
        )
        return
    out().print(
        f"published [bold green]{v.tag}[/] ({v.version_id[:12]}): {v.samples} samples "
        f"(train {v.train} / val {v.val}), +{v.added} −{v.removed} ~{v.changed} vs "
        f"{(v.parent_id or 'nothing')[:12]}",
        highlight=False,
    )


def export_cmd(
    version: Annotated[str, typer.Argument(help="Id, unique id prefix or tag.")],
    dest: Annotated[Path, typer.Argument(help="A new folder to write.")],
    fmt: Annotated[str, typer.Option("--format", help="npy or zarr.")] = "npy",
    dataset: Annotated[str | None, typer.Option(help=LATEST_HELP)] = None,
    split: Annotated[str | None, typer.Option(help="Only 'train' or 'val'.")] = None,
) -> None:
    """Write a self-contained copy of a version, readable with plain numpy or zarr."""
    from pipeline.datasets.cli_refs import dataset_for_refs
    from pipeline.datasets.export import export_version, open_ref

    try:
        reader = open_ref(version, dataset=dataset_for_refs([version], dataset))
        if split:
            reader = reader.split(split)
        summary = export_version(reader, dest, fmt=fmt)
    except known_errors() as exc:
        fail(str(exc))
    out().print(
        f"exported {summary['samples']} samples of {summary['tag']} to {dest} ({fmt})",
        highlight=False,
    )


def gc_cmd(
    keep_last: Annotated[
        int | None, typer.Option(help="Keep the newest N versions of each dataset (default: all).")
    ] = None,
    apply: Annotated[
        bool, typer.Option("--apply", help="Delete; without it, only report.")
    ] = False,
    min_age: Annotated[
        float, typer.Option(help="Leave anything younger than this many seconds.")
    ] = 3600.0,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Delete old versions and unreferenced segments (a dry run unless --apply)."""
    from pipeline.datasets.gc import collect

    try:
        plan = collect(keep_last=keep_last, apply=apply, min_age_s=min_age)
    except known_errors() as exc:
        fail(str(exc))
    if as_json:
        print_json(plan.to_dict())
        return
    verb = "deleted" if plan.applied else "would delete"
    c = out()
    c.print(
        f"{verb}: {len(plan.versions)} version(s), {len(plan.segments)} segment(s) "
        f"({plan.bytes / 1e6:.1f} MB), {len(plan.leftovers)} leftover folder(s)",
        highlight=False,
    )
    for v in plan.versions:
        c.print(f"  version {v['tag']}", highlight=False)
    for s in plan.segments:
        c.print(f"  segment {s['path']} ({s['bytes'] / 1e6:.1f} MB)", highlight=False)
    for rel in plan.leftovers:
        c.print(f"  leftover {rel}", highlight=False)
    for vid in plan.kept_for_runs:
        c.print(f"  kept {vid[:12]}: used by a training run", highlight=False)
    if plan.kept_for_builds:
        c.print(f"  kept {len(plan.kept_for_builds)} segment(s): leased by a build in flight")
    if not plan.applied:
        c.print("dry run: add --apply to delete")


def register(app: typer.Typer) -> None:
    """Add this area's commands to the ``laketrain`` app, in the order ``--help`` lists them."""
    from pipeline.datasets import (
        review_commands,  # quality, approve, reject
        version_commands,  # versions, show, diff, contains
    )

    app.command("build")(build_cmd)
    version_commands.register(app)
    app.command("export")(export_cmd)
    app.command("gc")(gc_cmd)
    review_commands.register(app)
