"""The runs pages' reads: ``pipeline.runs`` (list_runs, get_run, compare_runs, models,
champion, promote — the same answers the CLI gives) plus what only a page needs: the charts
of the curves, the Airflow links, the name shown. Not-found becomes the app's 404.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from pipeline.metadata.store import MetadataStore
from pipeline.ui.errors import BadRequest, NotFound
from pipeline.ui.run_curves import compare_charts, run_charts

# The train DAG's task that starts the trainer: its log is the trainer's output.
TRAINER_TASK = "launch"


def _runs() -> Any:
    import pipeline.runs as runs

    return runs


def display_name(run: dict[str, Any]) -> str:
    """The readable name (``digits-3fa2b1c0-2``); a row recorded before names existed gets the
    same rule's parts without the counter, so it is still not a raw dag_run id."""
    if run.get("name"):
        return str(run["name"])
    started = (run.get("started_at") or "")[:16].replace("-", "").replace(":", "").replace("T", "-")
    return f"{run.get('dataset')}-{(run.get('version_id') or '')[:8]}-{started}".rstrip("-")


def airflow_links(run: dict[str, Any]) -> dict[str, str] | None:
    """Links into Airflow's own UI (same origin: the page is served by the api-server) to the
    DAG run and the trainer task's log; None for a run Airflow did not start."""
    dag_id, dag_run_id = run.get("dag_id"), run.get("dag_run_id")
    if not (dag_id and dag_run_id):
        return None
    base = f"/dags/{quote(dag_id, safe='')}/runs/{quote(dag_run_id, safe='')}"
    return {
        "dag_run": base,
        "trainer_log": f"{base}/tasks/{TRAINER_TASK}",
        "result_log": f"{base}/tasks/record_result",
    }


def _decorate(run: dict[str, Any]) -> dict[str, Any]:
    run["display_name"] = display_name(run)
    run["links"] = airflow_links(run)
    return run


def resolve(store: MetadataStore, ref: str) -> str:
    runs = _runs()
    try:
        return runs.resolve_run(ref, store=store)
    except runs.RunNotFoundError as exc:
        raise NotFound(str(exc).strip("'\"")) from None


def list_runs(
    store: MetadataStore,
    dataset: str | None,
    status: str | None,
    *,
    limit: int,
    offset: int,
) -> dict[str, Any]:
    out = _runs().list_runs(dataset, status, store=store, limit=limit, offset=offset)
    out["runs"] = [_decorate(r) for r in out["runs"]]
    out["dataset"], out["status"] = dataset, status
    return out


def get_run(store: MetadataStore, ref: str) -> dict[str, Any]:
    """One run in full, with its metrics (read from beside its checkpoints)."""
    run = _runs().get_run(resolve(store, ref), store=store, metrics=True)
    if run is None:  # deleted between the two reads
        raise NotFound(f"no run {ref!r}")
    return _decorate(run)


def records_of(run: dict[str, Any]) -> list[dict[str, Any]]:
    m = run.get("metrics") or {}
    return [*m.get("train", []), *m.get("epochs", [])]


def run_page(store: MetadataStore, ref: str) -> dict[str, Any]:
    run = get_run(store, ref)
    run["charts"] = run_charts(records_of(run))
    return run


def compare(store: MetadataStore, a: str, b: str, *, limit: int = 20) -> dict[str, Any]:
    ra, rb = resolve(store, a), resolve(store, b)
    if ra == rb:
        raise BadRequest(f"compare needs two different runs, got {a!r} twice")
    out = _runs().compare_runs(ra, rb, store=store, limit=limit)
    _decorate(out["a"])
    _decorate(out["b"])
    return out


def compare_page(store: MetadataStore, a: str, b: str) -> dict[str, Any]:
    out = compare(store, a, b)
    ra, rb = out["a"], out["b"]
    out["charts"] = compare_charts(
        "A " + ra["display_name"], records_of(ra), "B " + rb["display_name"], records_of(rb)
    )
    return out


def models(store: MetadataStore, dataset: str | None) -> dict[str, Any]:
    items = _runs().models(dataset, store=store)
    for m in items:
        m["display_name"] = display_name(m)
    return {"dataset": dataset, "total": len(items), "models": items}


def champion(store: MetadataStore, dataset: str) -> dict[str, Any]:
    current = _runs().champion(dataset, store=store)
    if current is None:
        raise NotFound(f"dataset {dataset!r} has no champion yet (laketrain promote RUN_ID)")
    if current.get("run"):
        _decorate(current["run"])
    return current


def promote(store: MetadataStore, ref: str, by: str) -> dict[str, Any]:
    runs = _runs()
    run_id = resolve(store, ref)
    try:
        return runs.promote(run_id, by=by, store=store)
    except (ValueError, LookupError) as exc:  # PromotionError: not succeeded, no checkpoint
        raise BadRequest(str(exc)) from None
