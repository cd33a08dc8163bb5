"""``laketrain versions``, ``show``, ``diff`` and ``contains``: reading what the published
versions hold, from the metadata store (never from the version folders).

Registered by ``pipeline/datasets/commands.py``, which keeps the commands that write (build,
export, gc); heavy modules are imported inside each command so that ``laketrain --help`` stays
fast.
"""

from __future__ import annotations

from typing import Annotated

import typer

from pipeline.console import fail, out, print_json, say, short_time, table, warn
from pipeline.datasets.commands import LATEST_HELP, known_errors


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
    dataset: Annotated[str | None, typer.Option(help=LATEST_HELP)] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Show one version: manifest, class and split counts, invalid files, parent."""
    from rich.table import Table

    from pipeline.datasets.cli_refs import dataset_for_refs
    from pipeline.datasets.queries import get_version

    try:
        v = get_version(version, dataset_for_refs([version], dataset))
    except known_errors() as exc:
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
    dataset: Annotated[str | None, typer.Option(help=LATEST_HELP)] = None,
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
    except known_errors() as exc:
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


def register(app: typer.Typer) -> None:
    """Add these commands to the ``laketrain`` app."""
    app.command("versions")(versions_cmd)
    app.command("show")(show_cmd)
    app.command("diff")(diff_cmd)
    app.command("contains")(contains_cmd)
