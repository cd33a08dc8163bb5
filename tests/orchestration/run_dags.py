"""Run DAGs with ``dag.test()`` in this fresh process and print what happened as JSON.

argv[1]: a JSON spec {"home": ..., "runs": [[dag_id, conf|null, label], ...]}. The laketrain
settings (LAKE_DIR, DATA_ROOT, CHECKPOINT_URL, METADATA_DB_URL, ...) come from the environment;
AIRFLOW_HOME and the dags folder are set here, before Airflow is imported (it reads them once).
"""

import io
import json
import os
import sys
from contextlib import redirect_stdout
from pathlib import Path

spec = json.loads(sys.argv[1])
home = Path(spec["home"])
REPO = Path(__file__).resolve().parents[2]
os.environ.update(
    {
        "AIRFLOW_HOME": str(home / "airflow"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
    }
)

from airflow.utils import db  # noqa: E402

db.initdb()

from airflow.dag_processing.dagbag import DagBag  # noqa: E402
from airflow.models.asset import AssetEvent, AssetModel  # noqa: E402
from airflow.utils.session import create_session  # noqa: E402
from sqlalchemy import select  # noqa: E402

bag = DagBag(dag_folder=str(REPO / "dags"))
results = {"import_errors": {k: str(v) for k, v in bag.import_errors.items()}, "runs": []}
for dag_id, conf, label in spec["runs"]:
    dag = bag.get_dag(dag_id)
    buf = io.StringIO()
    error = None
    try:
        with redirect_stdout(buf):
            dr = dag.test(run_conf=conf)
        states = {f"{ti.task_id}[{ti.map_index}]": str(ti.state) for ti in dr.get_task_instances()}
        state, run_id = str(dr.state), dr.run_id
    except Exception as exc:  # e.g. ParamValidationError for a bad conf
        states, state, run_id, error = {}, None, None, f"{type(exc).__name__}: {exc}"
    with create_session() as session:
        events = (
            [
                {"uri": uri, "extra": extra}
                for uri, extra in session.execute(
                    select(AssetModel.uri, AssetEvent.extra)
                    .join(AssetModel, AssetModel.id == AssetEvent.asset_id)
                    .where(AssetEvent.source_run_id == run_id)
                    .order_by(AssetEvent.id)
                )
            ]
            if run_id
            else []
        )
    results["runs"].append(
        {
            "label": label,
            "state": state,
            "run_id": run_id,
            "tasks": states,
            "events": events,
            "error": error,
            "log": buf.getvalue(),
        }
    )
print("RESULT " + json.dumps(results, default=str))
