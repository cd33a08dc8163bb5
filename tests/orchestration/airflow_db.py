"""The test stacks' Airflow database: migrated once per test process, copied into each stack.

``airflow db migrate`` on a fresh SQLite file took 15-35 s a stack on the shared 2-core CI
machine (about 3 s of it CPU: the rest is the disk syncing each migration's commit), and four
stacks start per run. A copy of a migrated file is the same database; ``make run`` and
tests/orchestration/test_make_run.py / test_devstack.py still migrate for real.
"""

from __future__ import annotations

import shutil
from pathlib import Path


def migrate_template(home: Path) -> Path:
    """Migrate an Airflow database in ``home`` as the dev stack does; return the file."""
    from pipeline.orchestration.devstack import StackConfig, free_port
    from pipeline.orchestration.devstack.airflow_setup import airflow_env, init_airflow

    cfg = StackConfig(home=home, port=free_port())
    init_airflow(cfg, airflow_env(cfg), log=lambda _msg: None)
    return home / "airflow.db"


def seed_home(airflow_home: Path, template: Path) -> None:
    """Give a stack's AIRFLOW_HOME what ``db migrate`` leaves there: a copy of the migrated
    database, and the airflow.cfg it wrote (its paths moved to this home). Without the file,
    the four components starting at once would each write one, each with a fernet key of its
    own."""
    (airflow_home / "logs").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(template, airflow_home / "airflow.db")
    cfg = (template.parent / "airflow.cfg").read_text()
    (airflow_home / "airflow.cfg").write_text(cfg.replace(str(template.parent), str(airflow_home)))
