"""The readable name of a run and the address of its page.

A run is named ``<dataset>-<version id[:8]>-<n>``: the dataset, the short id of the version it
trained on, and the how-manieth run on that version it is (1, 2, ...), e.g. ``digits-3fa2b1c0-2``.
The name is given once, when the run's row is created, and is unique in the store; the raw
``run_id`` (a dag_run id such as ``asset_triggered__2026-12-01T07:22:34...``) stays beside it
and is what the trainer's RUN_ID and the checkpoint folder use. Every command that takes a
RUN_ID also takes the name (``queries.resolve_run``).
"""

from __future__ import annotations

from urllib.parse import quote

SHORT_ID = 8
# The run page of the UI (the Airflow plugin), under the api-server.
RUN_PAGE_PATH = "/laketrain/runs/{run_id}"
COMPARE_PAGE_PATH = "/laketrain/runs/compare?a={a}&b={b}"


def run_name(dataset: str, version_id: str, n: int) -> str:
    """``digits-3fa2b1c0-2``: the ``n``-th run on that version of ``dataset``."""
    return f"{dataset}-{version_id[:SHORT_ID]}-{n}"


def run_page_url(run_id: str, base_url: str = "") -> str:
    """The run's page: ``<base_url>/laketrain/runs/<run_id>`` (run_id URL-quoted)."""
    return base_url.rstrip("/") + RUN_PAGE_PATH.format(run_id=quote(run_id, safe=""))


def compare_page_url(a: str, b: str, base_url: str = "") -> str:
    return base_url.rstrip("/") + COMPARE_PAGE_PATH.format(a=quote(a, safe=""), b=quote(b, safe=""))
