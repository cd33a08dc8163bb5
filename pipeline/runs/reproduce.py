"""``laketrain reproduce``: a recorded run's version, config and command as a new run.

The run's params (what its launcher recorded: the train form's fields, command, env, gpus)
become a ``TrainParams`` on the run's exact version id; the local launcher runs it
(``user_run.launch``), or ``train_conf``/``trainer_env_lines`` say what another launcher needs.
No torch, no Airflow.
"""

from __future__ import annotations

from typing import Any

from pipeline.runs.record import RunNotFoundError


def params_of(row: dict[str, Any], *, launcher: str = "local") -> Any:
    """The TrainParams that rerun ``row`` (get_run's dict) with ``launcher``. The version is the
    run's id, never ``latest``; a run recorded by the trainer alone (no launcher) takes its
    fields from its config, and the built-in trainer as its command."""
    from pipeline.orchestration.env_contract import TrainParams
    from pipeline.training_params import FIELDS

    p = {**(row.get("config") or {}), **(row.get("params") or {})}
    # The launcher's command words; none recorded: the built-in trainer (whose own argv flags
    # are already in its config).
    command = p.get("command") or ""
    keep_image = launcher != "local" or row.get("launcher") == "docker"
    if launcher == "local" and keep_image and p.get("image"):
        launcher = "docker"  # `docker run` here, as `laketrain train --image` does
    data: dict[str, Any] = {
        "dataset": row["dataset"],
        "dataset_version": row["version_id"],
        **{f.name: p[f.name] for f in FIELDS if p.get(f.name) is not None},
        "launcher": launcher,
        "gpus": p.get("gpus", 0),
        # `laketrain train --image` runs docker here too: keep the image for such a run
        "image": (p.get("image") or "") if keep_image else "",
        "command": command,
        "env": p.get("env") or {},
        "cpu": p.get("cpu") or "",
        "memory": p.get("memory") or "",
    }
    return TrainParams.from_mapping(data)


def train_conf(row: dict[str, Any], *, launcher: str | None = None) -> dict[str, Any]:
    """The ``train`` DAG conf (``airflow dags trigger train --conf``) that reruns ``row``."""
    return params_of(row, launcher=launcher or row.get("launcher") or "local").to_dict()


def trainer_env_lines(row: dict[str, Any], run_id: str) -> list[str]:
    """``NAME=value`` lines of the environment contract for rerunning ``row`` as ``run_id``
    under any launcher; secrets appear by name only."""
    from pipeline.orchestration import tasks

    params = params_of(row)
    env = tasks.trainer_env(params, run_id=run_id, version_id=row["version_id"])
    from pipeline.orchestration.env_contract import basic_vars

    machine = set(basic_vars())  # PATH, HOME...: this machine's, not the run's
    lines = [f"{k}={v}" for k, v in sorted(env.public.items()) if k not in machine]
    lines += [f"{k}=<secret: set by your launcher>" for k in sorted(env.secret)]
    return lines


def config_differences(a: dict[str, Any] | None, b: dict[str, Any] | None) -> list[str]:
    """``name: a -> b`` for each config key that differs (empty when either is unknown)."""
    if not a or not b:
        return []
    return [
        f"{k}: {a.get(k)!r} -> {b.get(k)!r}"
        for k in sorted(set(a) | set(b))
        if a.get(k) != b.get(k) and k not in ("world_size",)
    ]


__all__ = ["RunNotFoundError", "config_differences", "params_of", "train_conf", "trainer_env_lines"]
