"""CLI commands of the datasets area: build, versions, show, diff, contains, export, gc.

Listings come from the metadata store (never from the version folders); heavy modules are
imported inside each command so that ``laketrain --help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pipeline.console import err, fail, out, print_json, say, short_time, table, warn

_LATEST_HELP = (
    "Dataset that 'latest' means (default: the dataset of the other version, "
    "or the only dataset with versions)."
)


def _known_errors() -> tuple[type[BaseException], ...]:
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
    except _known_errors() as exc:
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


def versions_cmd(
    dataset: Annotated[str | None, typer.Argument(help="Only this dataset.")] = None,
    limit: Annotated[int, typer.Option(help="At most this many rows.")] = 50,
    show_all: Annotated[
        bool, typer.Option("--all", help="Include versions deleted by gc.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """List dataset versions, newest first."""
    from pipeline.datasets.cli_refs import SHORT_ID, known_datasets, unknown_dataset_message
    from pipeline.datasets.queries import list_versions
    from pipeline.settings import get_settings

    rows = list_versions(dataset, limit=limit, include_deleted=show_all)
    if dataset is not None and not rows:
        known = known_datasets(get_settings().lake_dir)
        if dataset not in known:
            fail(unknown_dataset_message(dataset, known))
    if as_json:
        print_json(rows)
        return
    # The short id is the column people copy (show/diff/export take it as a prefix): it never
    # wraps, and the row fits 80 columns; tags and full ids are in --json and `show`.
    listing = table(f"{len(rows)} version(s)" + (f" of {dataset}" if dataset else ""), compact=True)
    listing.add_column("id", no_wrap=True)
    if dataset is None:
        listing.add_column("dataset", overflow="fold")
    listing.add_column("created UTC", no_wrap=True)
    listing.add_column("samples", justify="right", no_wrap=True)
    listing.add_column("train/val", justify="right", no_wrap=True)
    listing.add_column("vs parent", justify="right", no_wrap=True)
    listing.add_column("bad", justify="right", no_wrap=True)
    # Without --all only committed and quarantined (held by the quality gate) rows are listed:
    # the column shows up when one of them is held.
    with_status = show_all or any(r["status"] != "committed" for r in rows)
    if with_status:
        listing.add_column("status", no_wrap=True)  # blank = committed, so the row fits 80
    for r in rows:
        cells = [
            r["version_id"][:SHORT_ID],
            *([r["dataset"]] if dataset is None else []),
            short_time(r["created_at"]),
            str(r["samples"]),
            f"{r['train']}/{r['val']}",
            _compact_diff(r),
            str(r["invalid"]),
        ]
        status = "" if r["status"] == "committed" else r["status"]
        listing.add_row(*cells, *([status] if with_status else []))
    out().print(listing)


def _compact_diff(r: dict) -> str:
    """``+3 −1 ~2`` with the zero parts left out (``=`` for none): narrow enough for 80 columns."""
    parts = [
        f"{sign}{r[key]}"
        for sign, key in (("+", "added"), ("−", "removed"), ("~", "changed"))
        if r[key]
    ]
    return " ".join(parts) or "="


def show_cmd(
    version: Annotated[str, typer.Argument(help="Id, unique id prefix, tag or 'latest'.")],
    dataset: Annotated[str | None, typer.Option(help=_LATEST_HELP)] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Show one version: manifest, class and split counts, invalid files, parent."""
    from rich.table import Table

    from pipeline.datasets.cli_refs import dataset_for_refs
    from pipeline.datasets.queries import get_version

    try:
        v = get_version(version, dataset_for_refs([version], dataset))
    except _known_errors() as exc:
        fail(str(exc))
    if as_json:
        print_json(v)
        return
    c = out()
    c.print(f"[bold]{v['tag']}[/]  {v['version_id']}", highlight=False)
    parent = v["parent"]
    c.print(
        f"dataset {v['dataset']}, created {v['created_at']}, format {v['format']}, status {v['status']}",
        highlight=False,
    )
    c.print(
        f"parent: {parent['tag'] if parent else '(none)'}   diff: +{v['added']} −{v['removed']} ~{v['changed']}",
        highlight=False,
    )
    m = v["manifest"]
    c.print(
        f"recipe {m['recipe_hash'][:12]} ({m['modality']}, sample {m['sample_shape']} {m['sample_dtype']})",
        highlight=False,
    )
    c.print(f"mean {v['mean']}  std {v['std']}", highlight=False)
    counts = v["counts"]
    per_class = Table(
        title=f"{counts['samples']} samples from {counts['files']} files ({counts.get('duplicates', 0)} duplicates)"
    )
    regression = m.get("task") == "regression"
    per_class.add_column("target" if regression else "class")
    per_class.add_column("train", justify="right")
    per_class.add_column("val", justify="right")
    per = counts["per_split"]
    if regression:  # a histogram of the numeric target instead of class counts
        from pipeline.datasets.targets import histogram_rows

        for row in histogram_rows(m.get("target") or {}):
            per_class.add_row(row["label"], str(row["train"]), str(row["val"]))
    for cls in sorted(set(per["train"]["classes"]) | set(per["val"]["classes"])):
        per_class.add_row(
            cls or "(none)",
            str(per["train"]["classes"].get(cls, 0)),
            str(per["val"]["classes"].get(cls, 0)),
        )
    per_class.add_row("[bold]total[/]", str(counts["train"]), str(counts["val"]))
    c.print(per_class)
    if v["invalid_files"]:
        bad = Table(title=f"{len(v['invalid_files'])} invalid file(s) / line(s) left out")
        bad.add_column("path", overflow="fold")
        bad.add_column("line", justify="right")
        bad.add_column("reason", overflow="fold")
        for r in v["invalid_files"]:
            bad.add_row(r["path"], str(r["line"] or ""), r["reason"])
        c.print(bad)


def diff_cmd(
    a: Annotated[str, typer.Argument(help="Older version (id, prefix, tag or 'latest').")],
    b: Annotated[str, typer.Argument(help="Newer version (id, prefix, tag or 'latest').")],
    dataset: Annotated[str | None, typer.Option(help=_LATEST_HELP)] = None,
    limit: Annotated[int, typer.Option(help="List at most this many paths per kind.")] = 200,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Samples added, removed and changed from A to B, by lake path and md5."""
    from pipeline.datasets.cli_refs import dataset_for_refs
    from pipeline.datasets.queries import diff_versions

    try:
        d = diff_versions(
            a, b, dataset=dataset_for_refs([a, b], dataset), limit=None if as_json else limit
        )
    except _known_errors() as exc:
        fail(str(exc))
    if as_json:
        print_json(d)
        return
    c = out()
    n = d["counts"]
    c.print(
        f"{d['a']['tag']} → {d['b']['tag']}: +{n['added']} added, −{n['removed']} removed, ~{n['changed']} changed",
        highlight=False,
    )
    for r in d["added"]:
        c.print(f"  [green]+ {r['path']}[/]  {r['md5']}", highlight=False)
    for r in d["removed"]:
        c.print(f"  [red]− {r['path']}[/]  {r['md5']}", highlight=False)
    for r in d["changed"]:
        c.print(f"  [yellow]~ {r['path']}[/]  {r['old_md5']} → {r['new_md5']}", highlight=False)
    shown = len(d["added"]) + len(d["removed"]) + len(d["changed"])
    if shown < sum(n.values()):
        c.print(f"  … {sum(n.values()) - shown} more (use --limit or --json)")


def contains_cmd(
    path_or_md5: Annotated[
        str,
        typer.Argument(
            help="A 32-digit md5, or a file: its lake path (digits/3/0042.png), its path in "
            "the dataset folder with --dataset (3/0042.png), or its path on disk (absolute, "
            "or relative to here: var/lake/digits/3/0042.png)."
        ),
    ],
    dataset: Annotated[
        str | None, typer.Option(help="Read a relative path as one in this dataset's folder.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Which versions hold a file (by lake path or by md5), or why the lake's file is in none."""
    from pipeline.datasets.cli_refs import SHORT_ID, lake_file_holders
    from pipeline.settings import get_settings

    try:
        found = lake_file_holders(path_or_md5, dataset=dataset, lake_dir=get_settings().lake_dir)
    except ValueError as exc:
        fail(str(exc))
    rows = found.rows
    rejected = [f"rejected: {r['reason']} ({r['path']}, {r['status']})" for r in found.rejected]
    if as_json:
        print_json(rows)
        for line in rejected if not rows else []:
            warn(line)
        return
    if not rows:
        for line in rejected or [f"no version contains {found.key}"]:
            say(line)
        raise typer.Exit(1)
    by_md5 = len({r["path"] for r in rows}) > 1 or rows[0]["path"] != found.key
    listing = table(
        f"{len({r['version_id'] for r in rows})} version(s) contain {found.key}", compact=True
    )
    # Short ids and md5s never wrap (full ones: --json); a path folds only when it must.
    listing.add_column("id", no_wrap=True)
    listing.add_column("created UTC", no_wrap=True)
    listing.add_column(
        "path" if by_md5 else "md5", **({"overflow": "fold"} if by_md5 else {"no_wrap": True})
    )
    for col in ("label", "split", "index"):
        listing.add_column(col, overflow="fold")
    for r in rows:
        listing.add_row(
            r["version_id"][:SHORT_ID],
            short_time(r["created_at"]),
            r["path"] if by_md5 else r["md5"][:SHORT_ID],
            str(r["label"]),
            r["split"],
            str(r["index"]),
        )
    out().print(listing)
    for line in rejected:
        say(f"now {line}")


def export_cmd(
    version: Annotated[str, typer.Argument(help="Id, unique id prefix or tag.")],
    dest: Annotated[Path, typer.Argument(help="A new folder to write.")],
    fmt: Annotated[str, typer.Option("--format", help="npy or zarr.")] = "npy",
    dataset: Annotated[str | None, typer.Option(help=_LATEST_HELP)] = None,
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
    except _known_errors() as exc:
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
    except _known_errors() as exc:
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
    """Add this area's commands to the ``laketrain`` app."""
    app.command("build")(build_cmd)
    app.command("versions")(versions_cmd)
    app.command("show")(show_cmd)
    app.command("diff")(diff_cmd)
    app.command("contains")(contains_cmd)
    app.command("export")(export_cmd)
    app.command("gc")(gc_cmd)
    from pipeline.datasets import review_commands  # quality, approve, reject

    review_commands.register(app)
