"""
### train — train a model on a dataset version

**From the UI**: *Trigger DAG* opens a form — dataset and version (`latest`, a tag, an id or a
unique id prefix), epochs, batch size, learning rate, AMP, gradient checkpointing, model, seed,
launcher (`local` process, `docker` container or `kubernetes` pod) and GPUs; for your own
trainer, an image, a command, extra environment variables and Kubernetes CPU/memory requests
(the contract a trainer honours: docs/trainer-contract.md).

**By itself**: a new version of a dataset whose recipe sets `auto_train = true` (an asset event
on `laketrain://datasets/<name>`) starts a run on that version with the form's defaults.

1. **resolve** — the conf has only the form's keys (a typo such as `epoch` fails the run), the
   version exists (the error lists the latest ones when it does not) and has labels;
2. **check_leakage** — train and validation must share no sample;
3. **record_run** — the run, its params and its version go into the metadata store;
4. **launch** — the trainer runs with the environment contract (`DATASET_*`, `DATA_ROOT`,
   `CHECKPOINT_URL`, `RUN_ID`, `TRAIN_*`, boto3's `AWS_*`); `RUN_ID` is the same for every
   retry of this DAG run, so a retry resumes from the last checkpoint;
5. **record_result** — status, best metric and checkpoint URL from the trainer's
   `result.json`; a successful run is an asset event on `laketrain://models/<dataset>`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import Asset, AssetAlias, AssetAny, Metadata, Param, dag, task

from pipeline.orchestration import dagconfig
from pipeline.orchestration.env_contract import LAUNCHERS
from pipeline.orchestration.launchers import TRAINER_COMMAND
from pipeline.orchestration.tasks import MODEL_ALIAS, dataset_asset_uri
from pipeline.training_params import FIELDS as TRAIN_FIELDS

# The form offers only datasets that can be trained; the others are named in its help text.
_recipes, _not_offered = dagconfig.trainable_datasets()
_left_out = (
    " Not offered: "
    + ", ".join(f"{n} ({why.split(':', 1)[0]})" for n, why in sorted(_not_offered.items()))
    + "."
    if _not_offered
    else ""
)
_auto = [
    Asset(name=dataset_asset_uri(n), uri=dataset_asset_uri(n))
    for n in dagconfig.auto_train_datasets()
]
models = AssetAlias(MODEL_ALIAS)

_dataset_param = (
    Param(
        "digits" if "digits" in _recipes else _recipes[0],
        type="string",
        enum=_recipes,
        title="Dataset",
        description="The dataset to train on (a lake folder with a recipe in recipes/)."
        + _left_out,
    )
    if _recipes
    else Param(
        "",
        type="string",
        minLength=1,
        title="Dataset",
        description="The dataset to train on." + _left_out,
    )
)

# The training fields (epochs ... seed) are declared once, in pipeline/training_params.py: their
# defaults, ranges, choices, titles and help come from there, as the trainer's config does.
# Ranges are exclusive bounds on purpose (TrainField.json_schema): the form's number field
# clamps to `minimum`/`maximum` when it loses focus (epochs -1 became 1 without a word); it
# ignores the exclusive ones, so an out-of-range value reaches the validation and is refused
# with a message naming the field.

params = {
    "dataset": _dataset_param,
    "dataset_version": Param(
        "latest",
        type="string",
        minLength=1,
        title="Dataset version",
        description=(
            "'latest', a version tag (digits_v20261129_ab12cd34), a version id or a unique id"
            " prefix. Copy one from the Datasets page (in the nav) or `laketrain versions`."
        ),
    ),
    **{f.name: Param(f.default, **f.json_schema()) for f in TRAIN_FIELDS},
    "launcher": Param(
        dagconfig.default_launcher(),
        type="string",
        enum=list(LAUNCHERS),
        title="Launcher",
        description="local: a process on the worker; docker: a GPU container; kubernetes: a GPU pod.",
    ),
    "gpus": Param(
        -1,
        type="integer",
        exclusiveMinimum=-2,  # -1 (all GPUs) is a value; -2 is refused, not turned into -1
        exclusiveMaximum=65,
        title="GPUs",
        description=(
            "-1: all GPUs of the machine (one on Kubernetes), 0: CPU only, N: N GPUs (up to 64)."
        ),
    ),
    # Bring your own trainer: any image or command that honours the environment contract
    # (docs/trainer-contract.md). Their checks run at resolve, which says what is wrong; the
    # form's own error would only say "Bad Request".
    # Optional text fields take null: the form sends an empty field as null, and a plain
    # "string" type then marks the field invalid and keeps the Trigger button disabled.
    "image": Param(
        dagconfig.trainer_image() or None,
        type=["null", "string"],
        title="Image",
        description=(
            "docker and kubernetes launchers: the container image to run (default"
            " LAKETRAIN_TRAINER_IMAGE, the built-in trainer's image). Ignored by local."
        ),
    ),
    "command": Param(
        " ".join(TRAINER_COMMAND),
        type="string",
        minLength=1,
        title="Command",
        description=(
            "What to run, as shell words (no shell: no pipes or $VARS). Default: the built-in"
            " trainer. local: runs in the worker's environment from the project root, a leading"
            " `python` is the worker's Python (e.g. python examples/custom_trainer/train.py);"
            " docker/kubernetes: replaces the image's entrypoint."
        ),
    ),
    "env": Param(
        {},
        type="object",
        title="Extra environment",
        description=(
            'A JSON object of more variables for the run, e.g. {"MY_WARMUP": "100"}. Names'
            " [A-Z_][A-Z0-9_]*, at most 64; AWS_*, DATASET_*, DATA_ROOT, RUN_ID, CHECKPOINT_URL,"
            " METADATA_DB_URL and the TRAIN_ variables of the fields above cannot be set here."
            " Not for secrets: the values are stored with the run's parameters."
        ),
    ),
    "cpu": Param(
        None,
        type=["null", "string"],
        title="CPU request (Kubernetes)",
        description="CPUs the pod requests besides its GPUs, e.g. 4 or 500m; empty: none.",
    ),
    "memory": Param(
        None,
        type=["null", "string"],
        title="Memory request (Kubernetes)",
        description="Memory the pod requests, e.g. 16Gi or 512Mi; empty: none.",
    ),
}


@dag(
    dag_id=Path(__file__).stem,
    doc_md=__doc__,
    schedule=AssetAny(*_auto) if _auto else None,
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=dagconfig.max_active_training_runs(),
    params=params,
    tags=["laketrain"],
)
def train():
    @task
    def resolve(**context) -> dict:
        from airflow.sdk.exceptions import AirflowFailException

        from pipeline.orchestration import tasks
        from pipeline.orchestration.env_contract import sanitize_run_id
        from pipeline.orchestration.refusals import check_conf_keys

        versions = tasks.triggering_versions(context.get("triggering_asset_events"))
        try:
            # Airflow merges unknown conf keys into the params: {"epoch": 2} must not train
            # with the default epochs.
            check_conf_keys(context["dag_run"].conf, params, dag_id="train")
            p = tasks.choose_params(context["params"], versions)
            version = tasks.resolve_version(p)
        except tasks.SkipRun as exc:
            # Not AirflowSkipException: record_result (all_done) must tell "nothing to do"
            # from "resolve failed", and a skip leaves no XCom to tell them apart by.
            return {"skip": str(exc)}
        except tasks.RunRefused as exc:
            raise AirflowFailException(str(exc)) from None
        dag_run = context["dag_run"]
        return {
            **version,
            "params": p.to_dict(),
            "run_id": sanitize_run_id(dag_run.dag_id, dag_run.run_id),
            "dag_run_id": dag_run.run_id,
        }

    @task
    def check_leakage(resolved: dict) -> int:
        from airflow.sdk.exceptions import AirflowFailException

        from pipeline.orchestration import tasks

        tasks.skip_if_nothing_to_do(resolved)
        try:
            return tasks.leakage_check(resolved["dataset"], resolved["version_id"])
        except tasks.RunRefused as exc:
            raise AirflowFailException(str(exc)) from None

    @task
    def record_run(resolved: dict) -> dict:
        from pipeline.orchestration import tasks
        from pipeline.orchestration.env_contract import TrainParams

        tasks.skip_if_nothing_to_do(resolved)
        return tasks.record_started(
            resolved["run_id"],
            TrainParams.from_mapping(resolved["params"]),
            resolved["version_id"],
            dag_id="train",
            dag_run_id=resolved["dag_run_id"],
        )

    @task(retries=3, retry_delay=timedelta(seconds=5))
    def launch(resolved: dict, **context) -> int:
        from pipeline.orchestration import tasks
        from pipeline.orchestration.env_contract import TrainParams
        from pipeline.orchestration.launchers import exit_outcome

        tasks.skip_if_nothing_to_do(resolved)
        p = TrainParams.from_mapping(resolved["params"])
        try:
            code = tasks.launch(
                p, run_id=resolved["run_id"], version_id=resolved["version_id"], context=context
            )
        except Exception as exc:  # a container operator's failure: its words go on the run
            context["ti"].xcom_push(key="exit", value=tasks.exit_report(p, None, str(exc)))
            raise
        # record_result reads it when the command wrote no result.json (or was not found).
        context["ti"].xcom_push(key="exit", value=tasks.exit_report(p, code))
        exit_outcome(code)  # raises: retry on 75/1, fail at once on 2/3/126/127
        return code

    @task(outlets=[models], trigger_rule="all_done")
    def record_result(**context):
        from airflow.sdk.exceptions import AirflowFailException

        from pipeline.orchestration import tasks
        from pipeline.orchestration.results import record_finished

        ti = context["ti"]
        resolved = ti.xcom_pull(task_ids="resolve")
        started = ti.xcom_pull(task_ids="record_run")
        if resolved is None:
            raise AirflowFailException("resolve failed: see its log")
        tasks.skip_if_nothing_to_do(resolved)
        if started is None:
            raise AirflowFailException("the run did not start: see the failed task before launch")
        code = ti.xcom_pull(task_ids="launch")
        failed = None if code == 0 else "the trainer did not finish: see the launch task's log"
        outcome = record_finished(
            resolved["run_id"],
            launch_failed=failed,
            exit_report=ti.xcom_pull(task_ids="launch", key="exit"),
        )
        if outcome["status"] != "succeeded":
            raise AirflowFailException(f"training run {resolved['run_id']} {outcome['status']}")
        uri = tasks.model_asset_uri(resolved["dataset"])
        yield Metadata(
            Asset(name=uri, uri=uri),
            extra={**outcome, "dataset": resolved["dataset"], "version_id": resolved["version_id"]},
            alias=models,
        )

    @task
    def other_datasets(**context) -> list[dict]:
        """Versions of other auto_train datasets that arrived with this run's event."""
        from pipeline.orchestration import tasks

        versions = tasks.triggering_versions(context.get("triggering_asset_events"))
        return tasks.fan_out_confs(dict(context["params"]), versions)

    # One run trains one version: each other dataset that arrived together gets its own run.
    TriggerDagRunOperator.partial(task_id="train_other_datasets", trigger_dag_id="train").expand(
        conf=other_datasets()
    )

    resolved = resolve()
    checked = check_leakage(resolved)
    recorded = record_run(resolved)
    launched = launch(resolved)
    checked >> recorded >> launched >> record_result()


train()
