"""Scale-out on Celery: `lake_ingest` on a CeleryExecutor Airflow with two workers spreads its
mapped `process` shards over both, and commits the same version a single-machine build makes.

Real parts only: PostgreSQL (Airflow's DB, the metadata store, Celery's result backend), Redis
(the broker), the repository's own `dags/lake_ingest.py`, `airflow celery worker` processes,
the REST API v2 to trigger the run and read the task-instance records.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.scaleout.stack import REPO, CeleryStack

DATASET = "digits"
pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]


def _laketrain_env(lake: Path, data: Path, db_url: str, home: Path) -> dict[str, str]:
    return {
        "LAKETRAIN_HOME": str(home),
        "LAKE_DIR": str(lake),
        "DATA_ROOT": str(data),
        "METADATA_DB_URL": db_url,
        "CHECKPOINT_URL": (home / "objects").as_uri(),
        "RECIPES_DIR": str(REPO / "recipes"),
        "SETTLE_SECONDS": "0",
        "HASH_WORKERS": "1",
    }


def _start_py(code: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", code],
        env={"PATH": os.environ.get("PATH", ""), "LANG": "C.UTF-8", **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )


def _result(proc: subprocess.Popen[str]) -> str:
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-3000:]
    return stdout.strip().splitlines()[-1]


def _py(code: str, env: dict[str, str]) -> str:
    return _result(_start_py(code, env))


def _write_digits(lake: Path) -> int:
    from pipeline.lake.sample_lake import write_digits

    return write_digits(lake)


@pytest.mark.skipif(
    not (REPO / "dags" / "lake_ingest.py").exists() and not os.environ.get("CI"),
    reason="dags/lake_ingest.py not written yet",
)
def test_mapped_preprocessing_runs_on_both_workers_and_matches_a_single_machine_build(
    tmp_path: Path, pg_databases: dict[str, str], redis_url: str, request: pytest.FixtureRequest
) -> None:
    lake = tmp_path / "lake"
    n_files = _write_digits(lake)
    twin = tmp_path / "lake-twin"
    shutil.copytree(lake, twin)
    # The same lake built on one machine, in a process of its own while the stack starts and
    # runs (it shares nothing with it: its own lake copy, home, data root and SQLite store).
    (tmp_path / "single-home").mkdir()
    single_env = _laketrain_env(
        twin,
        tmp_path / "single-data",
        f"sqlite:///{tmp_path / 'single.db'}",
        tmp_path / "single-home",
    )
    single_build = _start_py(
        "from pipeline.metadata.store import make_engine, upgrade; import os; "
        "upgrade(make_engine(os.environ['METADATA_DB_URL'])); "
        "from pipeline.lake.scan import scan; scan(); "
        f"from pipeline.datasets.build import build; print(build({DATASET!r}).version_id)",
        single_env,
    )
    request.addfinalizer(lambda: single_build.poll() is None and single_build.kill())

    # ---- the distributed run ----------------------------------------------------------------
    md_url = pg_databases["metadata"]
    lt_env = _laketrain_env(lake, tmp_path / "data", md_url, tmp_path)
    _py(
        "from pipeline.metadata.store import make_engine, upgrade; import os; "
        "upgrade(make_engine(os.environ['METADATA_DB_URL'])); print('ok')",
        lt_env,
    )
    stack = CeleryStack(
        home=tmp_path / "stack",
        airflow_db_url=pg_databases["airflow"],
        redis_url=redis_url,
        dags_folder=REPO / "dags",
        extra_env=lt_env,
    )
    stack.home.mkdir()
    stack.migrate()
    try:
        stack.start()
        stack.wait_healthy()
        stack.wait_dag("lake_ingest")
        stack.run_dag("lake_ingest")
        # a scheduled run may have been created too (the DAG is also hourly): read them all
        runs = stack.api("GET", "/dags/lake_ingest/dagRuns", params={"limit": 100})["dag_runs"]
        tis = [ti for run in runs for ti in stack.task_instances("lake_ingest", run["dag_run_id"])]
    except BaseException:
        print(stack.logs())
        raise
    finally:
        stack.stop()

    failed = [ti for ti in tis if ti["state"] not in ("success", "skipped")]
    assert not failed, [(ti["task_id"], ti["map_index"], ti["state"]) for ti in failed]
    processed = [
        ti
        for ti in tis
        if ti["task_id"] == "process" and ti["map_index"] >= 0 and ti["state"] == "success"
    ]
    # 1,797 files at the default SHARD_FILES=512 files a shard: four shards
    assert len(processed) >= 4, f"{len(processed)} shards for {n_files} files"
    hosts = {ti["hostname"] for ti in processed}
    split = {h: sum(ti["hostname"] == h for ti in processed) for h in sorted(hosts)}
    print(f"process shards per worker: {split}")
    assert hosts == {"w1-host", "w2-host"}, f"process shards ran on {hosts}"
    assert {ti["hostname"] for ti in tis if ti["state"] == "success"} <= {"w1-host", "w2-host"}

    distributed = json.loads(
        _py(
            "import json; from pipeline.datasets.queries import list_versions; "
            f"print(json.dumps([v['version_id'] for v in list_versions(dataset={DATASET!r})]))",
            lt_env,
        )
    )
    assert len(distributed) == 1, distributed

    # ---- the same lake, built on one machine (started above) ---------------------------------
    assert distributed[0] == _result(single_build)
