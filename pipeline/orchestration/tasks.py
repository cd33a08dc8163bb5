"""The bodies of the ``train`` DAG's tasks, and the asset names both DAGs share.

The DAG files only wire these together; everything here can be called and tested without a
scheduler. Task inputs and outputs are small JSON dicts (ids, names, counts): data never
travels through XCom, and neither do credentials. The ``lake_ingest`` DAG's bodies live in
``ingest_tasks``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from pipeline.orchestration.env_contract import TrainParams

# RunRefused lives with the other refusal rules; the DAG files catch it as tasks.RunRefused.
from pipeline.orchestration.refusals import RunRefused, check_dataset

log = logging.getLogger("laketrain.orchestration")

LAKE_ASSET_URI = "laketrain://lake"
DATASET_ALIAS = "laketrain-dataset-versions"
MODEL_ALIAS = "laketrain-models"


def dataset_asset_uri(name: str) -> str:
    return f"laketrain://datasets/{name}"


def model_asset_uri(name: str) -> str:
    return f"laketrain://models/{name}"


# ----------------------------------------------------------------------------------- train


class SkipRun(Exception):
    """The run has nothing to do (e.g. the dataset's recipe does not auto-train)."""


def skip_if_nothing_to_do(resolved: Mapping[str, Any]) -> None:
    """Skip the calling task when resolve decided there is nothing to train."""
    if resolved.get("skip"):
        from airflow.sdk.exceptions import AirflowSkipException

        raise AirflowSkipException(resolved["skip"])


def triggering_versions(triggering_asset_events: Mapping[Any, Any] | None) -> list[dict[str, Any]]:
    """The version events that started an asset-triggered run: one per dataset (its newest),
    the newest last. Several datasets committed in one ingest can start ONE run together."""
    flat = [e for events in (triggering_asset_events or {}).values() for e in events]
    flat.sort(key=lambda e: str(getattr(e, "timestamp", "") or ""))
    newest: dict[str, dict[str, Any]] = {}
    for event in flat:
        extra = getattr(event, "extra", None)
        if isinstance(extra, Mapping) and extra.get("dataset") and extra.get("version_id"):
            newest.pop(extra["dataset"], None)  # re-insert: the order follows the newest event
            newest[extra["dataset"]] = dict(extra)
    return list(newest.values())


def fan_out_confs(
    params: Mapping[str, Any], versions: list[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Confs of the extra runs for the versions this run does not train (all but the newest),
    for the datasets whose recipe sets ``auto_train``."""
    from pipeline.datasets.recipes import load_recipe

    out = []
    for extra in versions[:-1]:
        if load_recipe(extra["dataset"]).auto_train:
            out.append(
                {
                    **dict(params),
                    "dataset": extra["dataset"],
                    "dataset_version": extra["version_id"],
                }
            )
    return out


def choose_params(params: Mapping[str, Any], events: list[Mapping[str, Any]] | None) -> TrainParams:
    """The run's parameters: the form's ``params``; on an asset-triggered run, the dataset and
    version of the newest dataset event instead (a version event's extra)."""
    merged = dict(params)
    if events:
        extra = events[-1]
        dataset = extra.get("dataset")
        if not dataset or not extra.get("version_id"):
            raise RunRefused(f"asset event without dataset/version_id: {dict(extra)!r}")
        # An asset event can be posted over REST with any extra: its name is input too.
        check_dataset(dataset, field="asset event dataset")
        from pipeline.datasets.recipes import load_recipe

        if not load_recipe(dataset).auto_train:
            raise SkipRun(
                f"recipe of {dataset!r} does not set auto_train: not training on its new version"
            )
        merged["dataset"] = dataset
        merged["dataset_version"] = extra["version_id"]
    try:
        return TrainParams.from_mapping(merged)
    except ValueError as exc:
        raise RunRefused(str(exc)) from None


def resolve_version(params: TrainParams) -> dict[str, Any]:
    """The committed version ``params`` names; RunRefused (naming the dataset and the
    reference, and what exists) when there is none, or when it has no labels to train on."""
    from pipeline.datasets.queries import VersionNotFound, get_version, list_versions
    from pipeline.orchestration.refusals import recipe_labels_problem, version_label_problem

    if problem := recipe_labels_problem(params.dataset):
        raise RunRefused(f"dataset {params.dataset!r} cannot be trained: {problem}")
    try:
        row = get_version(params.dataset_version, dataset=params.dataset)
    except VersionNotFound as exc:
        known = [v["tag"] for v in list_versions(params.dataset, limit=5)]
        hint = (
            f"; latest versions: {', '.join(known)}"
            if known
            else "; it has no committed version yet"
        )
        raise RunRefused(f"dataset_version: {exc}{hint}") from None
    if row.get("status") == "quarantined":
        # Held by the quality gate: not offered for training, even by its id, until approved.
        raise RunRefused(
            f"dataset_version: {row['tag']} is quarantined by the quality gate "
            f"(`laketrain quality {row['tag']}` says why); approve it first "
            f"(Required Actions in Airflow, or `laketrain approve {row['tag']}`)"
        )
    if problem := version_label_problem(row):
        # Refused here, not in the trainer as "train has labels outside 0..-1".
        raise RunRefused(f"dataset {params.dataset!r} cannot be trained: {problem}")
    return {"dataset": row["dataset"], "version_id": row["version_id"], "tag": row["tag"]}


def leakage_check(dataset: str, version_id: str) -> int:
    from pipeline.datasets.checks import check_leakage
    from pipeline.datasets.reader import open_version
    from pipeline.metadata.store import open_store

    reader = open_version(dataset, version_id, store=open_store())
    leaked = check_leakage(reader)
    if leaked:
        raise RunRefused(
            f"leakage: {len(leaked)} sample md5(s) are in both train and val of {dataset} "
            f"{version_id[:12]} (first: {', '.join(leaked[:5])}); refusing to train"
        )
    log.info(
        "leakage check: %s %s: train and val share no sample (%d samples)",
        dataset,
        version_id[:12],
        len(reader),
    )
    return len(reader)


def record_started(
    run_id: str, params: TrainParams, version_id: str, *, dag_id: str, dag_run_id: str
) -> dict[str, Any]:
    from pipeline.runs import record_run_started

    row = record_run_started(
        run_id,
        params.dataset,
        version_id,
        params.to_dict(),
        dag_id=dag_id,
        dag_run_id=dag_run_id,
        launcher=params.launcher,
        # "queued": the trainer's own "running" record then joins this attempt, not a new one.
        status="queued",
    )
    log.info("run %s recorded (attempt %s)", run_id, row.get("attempts"))
    return {"run_id": run_id, "attempts": row.get("attempts")}


def trainer_env(
    params: TrainParams, *, run_id: str, version_id: str, aws_conn_id: str = "aws_default"
):
    """The full trainer environment (secret part included) for this run. Never return it from
    a task."""
    from pipeline.orchestration.env_contract import aws_credentials, basic_vars, build_trainer_env
    from pipeline.settings import get_settings

    s = get_settings()
    return build_trainer_env(
        params,
        run_id=run_id,
        version_id=version_id,
        data_root=str(s.data_root),
        checkpoint_url=s.checkpoint_url,
        metadata_db_url=s.database_url,
        aws=aws_credentials(aws_conn_id),
        basics=basic_vars(),
        # an s3:// DATA_ROOT: a local trainer reads through this host's cache
        cache=(str(s.laketrain_cache_dir), s.laketrain_cache_mb),
    )


def launch(params: TrainParams, *, run_id: str, version_id: str, context: Any = None) -> int:
    """Run the trainer (the built-in one, or the run's own image/command) with the chosen
    launcher; return the exit code (local) or 0 (container operators raise on failure)."""
    from pipeline.orchestration import launchers
    from pipeline.orchestration.env_contract import command_argv
    from pipeline.orchestration.local_launcher import run_local
    from pipeline.settings import get_settings, project_root

    env = trainer_env(params, run_id=run_id, version_id=version_id)
    cfg = launchers.LauncherConfig.from_env()
    s = get_settings()
    user_command = _user_command(params)
    log.info(
        "launching %s trainer: run %s on %s %s, command %s (env: %s; %d secret variable(s) "
        "not shown)",
        params.launcher,
        run_id,
        params.dataset,
        version_id[:12],
        params.command or "built-in",
        ", ".join(sorted(env.public)),
        len(env.secret),
    )
    if params.launcher == "local":
        from pipeline.orchestration.usercode import user_argv

        return run_local(
            env,
            emit=_emit,
            grace_seconds=cfg.kill_grace_seconds,
            # A user's command runs from the project root, where its relative paths point.
            command=user_argv(params.command) if user_command else None,
            cwd=str(project_root()) if user_command else None,
        )
    command = command_argv(params.command) if user_command else None
    if params.launcher == "docker":
        op = launchers.docker_operator(
            **launchers.docker_kwargs(
                env,
                run_id=run_id,
                gpus=params.gpus,
                # The daemon resolves a bind mount on ITS host: with Airflow in a container,
                # LAKETRAIN_HOST_DATA_ROOT names the host path of DATA_ROOT.
                host_data_root=cfg.host_data_root or str(s.data_root),
                checkpoint_url=s.checkpoint_url,
                config=cfg,
                image=params.image,
                command=command,
            )
        )
    else:
        op = launchers.kubernetes_operator(
            **launchers.kubernetes_kwargs(
                env,
                run_id=run_id,
                gpus=params.gpus,
                checkpoint_url=s.checkpoint_url,
                config=cfg,
                image=params.image,
                command=command,
                cpu=params.cpu,
                memory=params.memory,
            )
        )
    op.execute(context)
    return 0


def _user_command(params: TrainParams) -> bool:
    """Whether the run names a command other than the built-in trainer's (the form's default)."""
    from pipeline.orchestration.env_contract import command_argv
    from pipeline.orchestration.launchers import TRAINER_COMMAND

    return bool(params.command) and command_argv(params.command) != TRAINER_COMMAND


def exit_report(params: TrainParams, code: int | None, error: str | None = None) -> dict:
    """What the launch task tells record_result (XCom key ``exit``): the exit code and, when it
    is not 0, the words for the run record. No environment, no credentials."""
    from pipeline.orchestration.usercode import exit_message
    from pipeline.redact import redact_text

    argv = params.command or "python -m training"
    message = redact_text(error)[:2000] if error else exit_message(argv, code)
    return {"code": code, "command": params.command or None, "message": message}


def _emit(line: str) -> None:
    # print, not log: the task log keeps the trainer's lines verbatim, one per line.
    print(line, flush=True)
