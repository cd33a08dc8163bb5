"""Models: the runs that produced one (succeeded, with a checkpoint), and the ``champion``
alias of a dataset, set by ``promote`` (who and when recorded; the history is kept:
``model_aliases`` is append-only and its newest row per (dataset, alias) is the holder)."""

from __future__ import annotations

import getpass
import os
from typing import Any

from sqlalchemy import select

from pipeline.metadata.base import utcnow
from pipeline.metadata.runs import RUN_SUCCEEDED, ModelAlias, TrainingRun
from pipeline.runs.record import RunNotFoundError, _iso, _store

CHAMPION = "champion"
ALIASES = (CHAMPION,)


class PromotionError(ValueError):
    """The run cannot carry the alias (not succeeded, no checkpoint)."""


def current_aliases(session: Any, dataset: str | None = None) -> dict[tuple[str, str], dict]:
    """(dataset, alias) -> the newest promotion row as a dict."""
    query = select(ModelAlias).order_by(ModelAlias.at, ModelAlias.id)
    if dataset is not None:
        query = query.where(ModelAlias.dataset == dataset)
    out: dict[tuple[str, str], dict] = {}
    for a in session.execute(query).scalars():
        out[(a.dataset, a.alias)] = _alias_dict(a)
    return out


def _alias_dict(a: ModelAlias) -> dict[str, Any]:
    return {
        "dataset": a.dataset,
        "alias": a.alias,
        "run_id": a.run_id,
        "by": a.by,
        "at": _iso(a.at),
    }


def default_actor() -> str:
    """Who promotes, when the caller does not say: LAKETRAIN_USER, else the login name."""
    try:
        return os.environ.get("LAKETRAIN_USER") or getpass.getuser()
    except Exception:  # no login name (a container without a passwd entry)
        return "unknown"


def models(dataset: str | None = None, store: Any = None) -> list[dict[str, Any]]:
    """The runs that produced a model (succeeded, with a best checkpoint URL), newest first:
    ``[{run_id, name, dataset, version_id, version_tag, metric_name, best_metric,
    checkpoint_url, finished_at, aliases: ["champion"] or []}]``."""
    from pipeline.runs.queries import _versions

    query = (
        select(TrainingRun)
        .where(TrainingRun.status == RUN_SUCCEEDED, TrainingRun.checkpoint_url.is_not(None))
        .order_by(TrainingRun.finished_at.desc(), TrainingRun.run_id)
    )
    if dataset is not None:
        query = query.where(TrainingRun.dataset == dataset)
    with _store(store).session() as session:
        rows = list(session.execute(query).scalars())
        versions = _versions(session, {r.version_id for r in rows})
        holders = {(a["dataset"], a["run_id"]): k[1] for k, a in current_aliases(session).items()}
        return [
            {
                "run_id": r.run_id,
                "name": r.name,
                "dataset": r.dataset,
                "version_id": r.version_id,
                "version_tag": getattr(versions.get(r.version_id), "tag", None),
                "metric_name": r.metric_name,
                "best_metric": r.best_metric,
                "checkpoint_url": r.checkpoint_url,
                "finished_at": _iso(r.finished_at),
                "aliases": [holders[(r.dataset, r.run_id)]]
                if (r.dataset, r.run_id) in holders
                else [],
            }
            for r in rows
        ]


def promote(
    run_id: str, *, by: str | None = None, alias: str = CHAMPION, store: Any = None
) -> dict[str, Any]:
    """Make ``run_id`` its dataset's ``alias`` (``champion``); returns the promotion
    ``{dataset, alias, run_id, by, at, previous: run_id | None}``. Only a succeeded run with
    a checkpoint can be promoted (PromotionError says why not)."""
    if alias not in ALIASES:
        raise ValueError(f"alias must be one of {', '.join(ALIASES)}, got {alias!r}")
    by = (by or default_actor())[:255]
    with _store(store).session() as session:
        run = session.get(TrainingRun, run_id)
        if run is None:
            raise RunNotFoundError(f"no run {run_id!r}")
        if run.status != RUN_SUCCEEDED or not run.checkpoint_url:
            raise PromotionError(
                f"run {run_id} is {run.status}"
                + ("" if run.checkpoint_url else " and has no checkpoint")
                + ": only a succeeded run with a checkpoint is a model"
            )
        previous = current_aliases(session, run.dataset).get((run.dataset, alias))
        row = ModelAlias(dataset=run.dataset, alias=alias, run_id=run_id, by=by, at=utcnow())
        session.add(row)
        session.flush()
        out = _alias_dict(row)
    out["previous"] = previous["run_id"] if previous else None
    return out


def champion(dataset: str, store: Any = None) -> dict[str, Any] | None:
    """The dataset's champion now: the promotion dict plus ``run``: get_run's summary, or
    None when no run was ever promoted."""
    from pipeline.runs.queries import get_run

    s = _store(store)
    with s.session() as session:
        current = current_aliases(session, dataset).get((dataset, CHAMPION))
    if current is None:
        return None
    return {**current, "run": get_run(current["run_id"], s)}


def alias_history(dataset: str, alias: str = CHAMPION, store: Any = None) -> list[dict]:
    """Every promotion of ``alias`` on ``dataset``, newest first."""
    with _store(store).session() as session:
        rows = session.execute(
            select(ModelAlias)
            .where(ModelAlias.dataset == dataset, ModelAlias.alias == alias)
            .order_by(ModelAlias.at.desc(), ModelAlias.id.desc())
        ).scalars()
        return [_alias_dict(a) for a in rows]
