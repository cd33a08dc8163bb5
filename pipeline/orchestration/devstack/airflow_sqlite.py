"""Connection arguments for the dev stack's Airflow database, a SQLite file.

The four Airflow components and every running task (through the execution API) write that one
file. sqlite3 waits 5 s for a write lock by default; on a busy two-core machine a REST call
once waited that long behind the scheduler and the task API, and a trigger of the ``train``
DAG failed with HTTP 500 "Database error" (``INSERT INTO log``, a request of exactly 5.0 s).
Airflow reads these dicts through ``[database] sql_alchemy_connect_args`` and
``sql_alchemy_connect_args_async`` (import paths, set by ``airflow_setup.airflow_env``): a
writer now waits up to 30 s, which the stack's slowest writer never holds a lock for.
"""

from __future__ import annotations

LOCK_WAIT_SECONDS = 30.0

# Two dicts: Airflow adds check_same_thread to the sync one in place.
SYNC: dict[str, object] = {"timeout": LOCK_WAIT_SECONDS}
ASYNC: dict[str, object] = {"timeout": LOCK_WAIT_SECONDS}
