"""CLI commands of the runs area: runs, run, compare, models, promote, reproduce, lineage.

Everything is read through ``pipeline.runs`` (the same functions the UI's run pages use); the
modules are imported inside each command, so registering them costs ``laketrain``'s start-up
nothing. A RUN_ID argument also takes a run's readable name or a unique RUN_ID prefix.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from pipeline.console import fail, out, print_json, print_whole, say, table, warn


def _resolve(ref: str) -> str:
    from pipeline.runs import RunNotFoundError, resolve_run

    try:
        return resolve_run(ref)
    except RunNotFoundError as exc:
        fail(str(exc), code=1)
        raise AssertionError("unreachable") from None


def _num(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(round(seconds))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def _metric(row: dict) -> str:
    if row.get("best_metric") is None:
        return "-"
    return f"{row.get('metric_name') or 'metric'}={_num(row['best_metric'])}"


def runs_cmd(
    dataset: Annotated[str | None, typer.Argument(help="Only the runs of this dataset.")] = None,
    status: Annotated[
        str | None, typer.Option(help="queued, running, succeeded, failed or preempted.")
    ] = None,
    limit: Annotated[int, typer.Option(help="At most this many runs.")] = 50,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """List training runs, newest first: name, dataset, version, status, best metric, time."""
    from pipeline.runs import RUN_STATUSES, list_runs

    if status is not None and status not in RUN_STATUSES:
        fail(f"--status must be one of {', '.join(RUN_STATUSES)}, got {status!r}")
    page = list_runs(dataset, status, limit=limit)
    if as_json:
        print_json(page)
        return
    listing = table(
        f"{len(page['runs'])} of {page['total']} runs",
        *("name", "dataset", "version", "status", "best metric", "duration", "started", "RUN_ID"),
    )
    for r in page["runs"]:
        listing.add_row(
            (r["name"] or "-") + (" [champion]" if r["is_champion"] else ""),
            r["dataset"],
            r["version_tag"] or r["version_id"][:12],
            r["status"],
            _metric(r),
            _duration(r["duration_s"]),
            (r["started_at"] or "")[:19],
            r["run_id"],
        )
    print_whole(listing)


def run_cmd(
    run_id: Annotated[str, typer.Argument(help="RUN_ID, run name or unique RUN_ID prefix.")],
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """One run: params, version, attempts, error, checkpoints and per-epoch metrics."""
    from pipeline.runs import get_run, run_page_url

    row = get_run(_resolve(run_id), metrics=True)
    if row is None:
        fail(f"no run {run_id!r}", code=1)
    if as_json:
        print_json(row)
        return
    from rich.table import Table

    say(
        f"{row['name'] or row['run_id']}  ({row['status']})"
        + ("  champion" if row["is_champion"] else "")
    )
    say(
        f"RUN_ID {row['run_id']}"
        + (f"  dag {row['dag_id']} / {row['dag_run_id']}" if row["dag_run_id"] else "")
    )
    say(f"dataset {row['dataset']}, version {row['version_tag'] or '-'} ({row['version_id']})")
    say(f"manifest sha256 {row['manifest_sha256'] or '-'}")
    say(
        f"best {_metric(row)}, duration {_duration(row['duration_s'])}, started {row['started_at']}"
    )
    cv = row.get("code_version") or {}
    code = (
        f"git {cv['commit'][:12]}{' (dirty)' if cv.get('dirty') else ''}"
        if cv.get("commit")
        else f"package {cv.get('package_version') or '-'}"
    )
    say(f"code {code}, requirements.lock sha256 {(row.get('lock_sha256') or '-')[:12]}")
    say(f"launcher {row['launcher'] or '-'}, command {' '.join(row['command'] or []) or '-'}")
    if row.get("image"):
        say(
            f"image {row['image']}"
            + (f" ({row['image_digest']})" if row.get("image_digest") else "")
        )
    say(f"page {run_page_url(row['run_id'])} (under the Airflow api-server)")
    if row.get("error"):
        say(f"error: {row['error']}")
    params = Table(title="params")
    params.add_column("name")
    params.add_column("value", overflow="fold")
    for k, v in sorted(row["params"].items()):
        params.add_row(k, json.dumps(v) if isinstance(v, dict | list) else str(v))
    print_whole(params)
    attempts = table(
        f"{len(row['attempt_log'])} attempt(s)",
        *("n", "status", "launcher", "started", "ended", "exit code", "error"),
    )
    for a in row["attempt_log"]:
        attempts.add_row(
            str(a["n"]),
            a["status"],
            a["launcher"] or "-",
            (a["started_at"] or "")[:19],
            (a["ended_at"] or "-")[:19],
            _num(a["exit_code"]),
            a["error"] or "",
        )
    print_whole(attempts)
    # Lines, not a table: a URL must come out whole (a table folds it at the width).
    say(f"{len(row['checkpoints'])} checkpoint(s):")
    for k in row["checkpoints"]:
        best = " best" if k["is_best"] else ""
        gone = " (deleted by retention)" if k["deleted_at"] else ""
        say(
            f"  step {k['step']} epoch {_num(k['epoch'])} metric {_num(k['metric'])}{best}  {k['url']}{gone}"
        )
    m = row["metrics"]
    if m["epochs"]:
        epochs = Table(title=f"per-epoch metrics ({m['source']})")
        for col in m["columns"]:
            epochs.add_column(col, justify="right")
        for rec in m["epochs"]:
            epochs.add_row(*(_num(rec.get(col)) for col in m["columns"]))
        print_whole(epochs)
    elif m["error"]:
        say(f"metrics: {m['error']}")
    for f in m["diagnosis"]:
        say(f"diagnosis [{f.get('rule')}] {f.get('message')}")
    for e in row["events"]:
        say(f"{e['time'][:19]} {e['level']} {e['message']}")


def compare_cmd(
    run_a: Annotated[str, typer.Argument(help="The first run.")],
    run_b: Annotated[str, typer.Argument(help="The second run.")],
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Two runs side by side: the params that differ, the metrics, and the data diff between
    their versions."""
    from pipeline.runs import compare_runs

    a, b = _resolve(run_a), _resolve(run_b)
    d = compare_runs(a, b)
    if as_json:
        print_json(d)
        return

    c = out()
    ra, rb = d["a"], d["b"]
    na, nb = ra["name"] or ra["run_id"], rb["name"] or rb["run_id"]

    def side_by_side(title: str, rows: list[dict]) -> None:
        pairs = table(title, "", na, nb)
        for r in rows:
            pairs.add_row(r.get("name") or r.get("label"), _num(r["a"]), _num(r["b"]))
        print_whole(pairs)

    side_by_side(f"params that differ ({len(d['params'])})", d["params"])
    side_by_side("metrics", d["metrics"])
    data = d["data"]
    if data["same_version"]:
        c.print(f"same data: both trained on {ra['version_tag'] or ra['version_id']}", markup=False)
        return
    if data["error"]:
        c.print(f"data diff: {data['error']}", markup=False)
        return
    n = data["diff"]["counts"]
    c.print(
        f"data: {ra['version_tag'] or ra['version_id'][:12]} → "
        f"{rb['version_tag'] or rb['version_id'][:12]}: +{n['added']} added, "
        f"−{n['removed']} removed, ~{n['changed']} changed samples",
        markup=False,
        highlight=False,
    )
    if data["class_counts"]:
        side_by_side("samples per class", data["class_counts"])
    c.print(f"the full list: {d['diff_command']}", markup=False, highlight=False)


def models_cmd(
    dataset: Annotated[str | None, typer.Argument(help="Only this dataset's models.")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """The runs that produced a model: version, metric and best checkpoint URL."""
    from pipeline.runs import models

    rows = models(dataset)
    if as_json:
        print_json(rows)
        return
    listing = table(
        f"{len(rows)} model(s)",
        *("name", "alias", "dataset", "version", "metric", "checkpoint", "RUN_ID"),
    )
    for r in rows:
        listing.add_row(
            r["name"] or "-",
            ",".join(r["aliases"]),
            r["dataset"],
            r["version_tag"] or r["version_id"][:12],
            _metric(r),
            r["checkpoint_url"],
            r["run_id"],
        )
    print_whole(listing)


def promote_cmd(
    run_id: Annotated[str, typer.Argument(help="The run whose model becomes the champion.")],
    by: Annotated[
        str | None, typer.Option(help="Who promotes (default: LAKETRAIN_USER or the login).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Make a run's model its dataset's champion (who and when are recorded)."""
    from pipeline.runs import RunNotFoundError, promote
    from pipeline.runs.models import PromotionError

    try:
        out = promote(_resolve(run_id), by=by)
    except (RunNotFoundError, PromotionError) as exc:
        fail(str(exc), code=1)
    if as_json:
        print_json(out)
        return
    before = f" (was {out['previous']})" if out["previous"] else ""
    out().print(
        f"{out['run_id']} is the {out['alias']} of {out['dataset']}{before}; by {out['by']} at {out['at']}",
        markup=False,
        highlight=False,
    )


def reproduce_cmd(
    run_id: Annotated[str, typer.Argument(help="The run to reproduce.")],
    new_run_id: Annotated[
        str | None, typer.Option("--run-id", help="RUN_ID of the new run (default: a new one).")
    ] = None,
    print_only: Annotated[
        bool,
        typer.Option(
            "--print",
            help="Start nothing: print the train DAG conf and the environment for another launcher.",
        ),
    ] = False,
) -> None:
    """Rerun a run on the same version, config and command (the local launcher), or print
    what another launcher needs. Warns when the code version or the lock differs."""
    import sys

    from pipeline.orchestration.env_contract import ContractError
    from pipeline.runs import get_run, record_run_event, repro
    from pipeline.runs.reproduce import config_differences, params_of, train_conf, trainer_env_lines

    row = get_run(_resolve(run_id))
    assert row is not None
    for line in repro.differences(row):
        warn(f"warning: {line}")
    from pipeline.orchestration.user_run import launch
    from pipeline.orchestration.user_run import new_run_id as make_run_id

    new = new_run_id or make_run_id()
    try:
        params = params_of(row)
        conf = train_conf(row)
    except ContractError as exc:
        fail(f"the run's recorded params cannot be rerun: {exc}")
    if print_only:
        print(f"# the train DAG: airflow dags trigger train --conf '{json.dumps(conf)}'")
        print(f"# any launcher: this environment (RUN_ID {new})")
        for line in trainer_env_lines(row, new):
            print(line)
        return
    code = launch(params, run_id=new)
    try:
        record_run_event(new, "INFO", f"reproduction of {row['run_id']} ({row['name']})")
    except Exception:
        pass
    again = get_run(new)
    for line in config_differences(row.get("config"), (again or {}).get("config")):
        print(f"warning: config differs from the original's: {line}", file=sys.stderr)
    raise typer.Exit(code)


def lineage_cmd(
    ref: Annotated[str, typer.Argument(help="A RUN_ID / run name, or a lake path / md5.")],
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Lineage: of a run (model → run → version → lake files), or of a lake file (file →
    versions → runs → models)."""
    from pipeline.runs import RunNotFoundError, file_lineage, resolve_run, run_lineage

    try:
        out: dict[str, Any] = {"kind": "run", **run_lineage(resolve_run(ref))}
    except RunNotFoundError:
        out = {"kind": "file", **file_lineage(ref)}
    if as_json:
        print_json(out)
        return
    if out["kind"] == "run":
        r, v = out["run"], out["version"]
        if out["model"]:
            alias = f" [{', '.join(out['model']['aliases'])}]" if out["model"]["aliases"] else ""
            say(f"model {out['model']['checkpoint_url']}{alias}")
        say(
            f"  ← run {r['name'] or r['run_id']} ({r['status']}, {_metric(r)}) RUN_ID {r['run_id']}"
        )
        if v is None:
            say(f"    ← version {r['version_id']} (not in this store)")
            return
        say(f"    ← version {v['tag']} ({v['version_id']}), {v['samples']} samples")
        f = out["files"]
        say(
            f"      ← {f['total']} lake file(s)"
            + (f", the first {len(f['files'])}:" if f["files"] else "")
        )
        for x in f["files"]:
            say(f"        {x['path']}  {x['md5']}  {x['label']}  {x['split']}")
        return
    if not out["versions"]:
        fail(f"{ref!r} is neither a run nor a file of any version", code=1)
    say(f"file {ref}")
    for v in out["versions"]:
        say(f"  → version {v['tag']} ({v['path']}, {v['label']}, {v['split']})")
        for r in v["runs"]:
            model = (
                " → model" + (f" [{', '.join(r['aliases'])}]" if r["aliases"] else "")
                if r["is_model"]
                else ""
            )
            say(f"    → run {r['name'] or r['run_id']} ({r['status']}, {_metric(r)}){model}")


def register(app: typer.Typer) -> None:
    """Add this area's commands to the ``laketrain`` app."""
    app.command("runs")(runs_cmd)
    app.command("run")(run_cmd)
    app.command("compare")(compare_cmd)
    app.command("models")(models_cmd)
    app.command("promote")(promote_cmd)
    app.command("reproduce")(reproduce_cmd)
    app.command("lineage")(lineage_cmd)
