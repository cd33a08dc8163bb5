"""``make run``: the whole platform on this machine, on loopback only, and ``make stop``.

``python -m pipeline.orchestration.devstack up`` (what ``make run`` calls):

1. creates the sample lake when the lake is empty;
2. initialises Airflow under ``var/airflow`` (SQLite, LocalExecutor, parallelism sized to the
   machine, examples off, DAGs unpaused, a generated JWT secret, API secret key and admin
   password kept there), then ``airflow db migrate``;
3. starts the api-server on 127.0.0.1 (port 8080, or a free one), the scheduler, the
   dag-processor and the triggerer (no log servers: nothing listens on 0.0.0.0);
4. prints the UI URL and the login, then follows along: the watcher fires, ingest builds a
   version, training runs on it.

Ctrl-C (or SIGTERM, or ``devstack stop`` from another shell) stops every process it started:
SIGTERM to each process group, then SIGKILL after a grace period.

One module a job: ``config`` (where the stack lives, ports), ``credentials`` (secrets kept
once, mode 0600), ``airflow_setup`` (the components' environment, ``db migrate``, argv),
``processes`` (process groups: start, stop, listeners), ``api`` (a REST API v2 client),
``stack`` (the four components as one unit, and the pid file), ``cli`` (``up``/``stop``/
``status``). The names below are the package's public face (tests, bench and ``make run``).
"""

from pipeline.orchestration.devstack.airflow_setup import (
    airflow_bin,
    airflow_env,
    component_argv,
    init_airflow,
)
from pipeline.orchestration.devstack.api import Api, wait_healthy
from pipeline.orchestration.devstack.cli import main
from pipeline.orchestration.devstack.config import (
    ADMIN_USER,
    COMPONENTS,
    HOST,
    PID_FILE,
    StackConfig,
    default_parallelism,
    free_port,
    repo_root,
)
from pipeline.orchestration.devstack.credentials import admin_password
from pipeline.orchestration.devstack.processes import (
    Proc,
    listeners,
    start_component,
    start_components,
    stop_groups,
)
from pipeline.orchestration.devstack.stack import DevStack, prepare_lake, read_pid_file

__all__ = [
    "ADMIN_USER",
    "COMPONENTS",
    "HOST",
    "PID_FILE",
    "Api",
    "DevStack",
    "Proc",
    "StackConfig",
    "admin_password",
    "airflow_bin",
    "airflow_env",
    "component_argv",
    "default_parallelism",
    "free_port",
    "init_airflow",
    "listeners",
    "main",
    "prepare_lake",
    "read_pid_file",
    "repo_root",
    "start_component",
    "start_components",
    "stop_groups",
    "wait_healthy",
]
