"""Parse one DAG file the way the dag-processor does, in a fresh process whose databases are
unreachable; report (as JSON on stdout) the import errors, the parse time (after Airflow itself
is imported), every DB connect or network connection attempted, and what the DAGs look like."""

import json
import socket
import sys
import time

attempts: list[str] = []

import sqlalchemy.engine  # noqa: E402

_connect = sqlalchemy.engine.Engine.connect


def _engine_connect(self, *a, **k):
    attempts.append(f"db connect {self.url!r}")
    return _connect(self, *a, **k)


sqlalchemy.engine.Engine.connect = _engine_connect
_create = socket.create_connection


def _socket_connect(address, *a, **k):
    attempts.append(f"socket connect {address!r}")
    return _create(address, *a, **k)


socket.create_connection = _socket_connect

import airflow  # noqa: E402,F401
import airflow.sdk  # noqa: E402,F401
from airflow.dag_processing.dagbag import DagBag  # noqa: E402


def walk(cond):
    if cond is None:
        return []
    if hasattr(cond, "objects"):
        return [a for o in cond.objects for a in walk(o)]
    return [cond]


path = sys.argv[1]
t0 = time.perf_counter()
bag = (
    DagBag(dag_folder=path, bundle_path=None)
    if "bundle_path" in DagBag.__init__.__code__.co_varnames
    else DagBag(dag_folder=path)
)
seconds = time.perf_counter() - t0
dags = {}
for dag_id, dag in bag.dags.items():
    timetable = dag.timetable
    info = {
        "timetable": type(timetable).__name__,
        "max_active_runs": dag.max_active_runs,
        "doc_md": bool(dag.doc_md),
        "tasks": sorted(dag.task_dict),
        "params": {k: dag.params.get_param(k).schema for k in dag.params},
        "param_defaults": {k: dag.params[k] for k in dag.params},
        "param_descriptions": {k: dag.params.get_param(k).description for k in dag.params},
        "assets": [],
        "watchers": [],
    }
    for asset in walk(getattr(timetable, "asset_condition", None)):
        info["assets"].append(asset.uri)
        if True:
            for w in asset.watchers:
                info["watchers"].append({"name": w.name, "trigger": w.trigger.serialize()})
    dags[dag_id] = info
print(
    "RESULT "
    + json.dumps(
        {
            "import_errors": {k: str(v) for k, v in bag.import_errors.items()},
            "seconds": seconds,
            "attempts": attempts,
            "dags": dags,
        },
        default=str,
    )
)
