"""Training runs in the metadata store: recording them (``record``), reading them
(``queries``: the list, one run, two compared), the models they made and the ``champion``
alias (``models``), lineage both ways (``lineage``) and what reproduces one (``repro``).

Every name the trainer, the launchers, the CLI and the UI use is importable from
``pipeline.runs``; no torch and no Airflow anywhere in the package. Dict shapes: docs/runs.md.
"""

from __future__ import annotations

from pipeline.runs.lineage import file_lineage, run_lineage
from pipeline.runs.models import (
    CHAMPION,
    alias_history,
    champion,
    models,
    promote,
)
from pipeline.runs.names import run_name, run_page_url
from pipeline.runs.queries import (
    compare_runs,
    get_run,
    list_runs,
    resolve_run,
    run_metrics,
    runs_for_version,
)
from pipeline.runs.record import (
    RUN_STATUSES,
    RunNotFoundError,
    record_checkpoint,
    record_checkpoint_deleted,
    record_run_details,
    record_run_event,
    record_run_finished,
    record_run_started,
)

__all__ = [
    "CHAMPION",
    "RUN_STATUSES",
    "RunNotFoundError",
    "alias_history",
    "champion",
    "compare_runs",
    "file_lineage",
    "get_run",
    "list_runs",
    "models",
    "promote",
    "record_checkpoint",
    "record_checkpoint_deleted",
    "record_run_details",
    "record_run_event",
    "record_run_finished",
    "record_run_started",
    "resolve_run",
    "run_lineage",
    "run_metrics",
    "run_name",
    "run_page_url",
    "runs_for_version",
]
