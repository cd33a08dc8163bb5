"""``laketrain train --command "…"`` (and ``--image``): a user's own trainer, run here with the
full environment contract, recorded like a train DAG run (queued → running → result).

The same pieces as the train DAG: ``TrainParams`` checks the flags, the version reference is
resolved to its id before launch, ``build_trainer_env`` builds the environment from scratch,
``run_local`` runs the process (or ``docker run`` for ``--image``), and
``results.record_finished`` records the outcome from ``result.json`` or, when the command wrote
none, from its exit status. Give ``--run-id`` of an earlier run to resume it: the command gets
the same ``RUN_ID``, hence the same ``CHECKPOINT_URL/<RUN_ID>/`` to resume from.
"""

from __future__ import annotations

import argparse
import secrets
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from pipeline.orchestration.env_contract import ContractError, TrainerEnv, TrainParams
from pipeline.training_params import FIELDS

USER_FLAGS = ("--command", "--image")
DOCKER_CLIENT_VARS = ("DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_CONFIG", "DOCKER_CERT_PATH")


def wants_user_command(argv: Sequence[str]) -> bool:
    """Whether ``laketrain train`` was asked to run a user's command or image."""
    return any(a == f or a.startswith(f + "=") for a in argv for f in USER_FLAGS)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="laketrain train",
        description="Run your own trainer on a dataset version with the environment contract "
        "(docs/trainer-contract.md) and record the run. Without --command/--image, "
        "`laketrain train` runs the built-in trainer.",
    )
    p.add_argument("--command", default="", help="what to run, as shell words (no shell)")
    p.add_argument("--image", default="", help="run the command in this image (docker run)")
    p.add_argument("--dataset", required=True, help="DATASET_NAME")
    p.add_argument("--version", default="latest", help="id, id prefix, tag or latest")
    p.add_argument("--run-id", default="", help="RUN_ID; an earlier run's id resumes it")
    p.add_argument("--gpus", type=int, default=0, help="-1 all, 0 CPU only (default), N GPUs")
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an extra variable for the run (repeatable)",
    )
    for f in FIELDS:
        p.add_argument(
            f"--{f.name.replace('_', '-')}",
            dest=f.name,
            default=None,
            metavar="V",
            help=f"{f.help} (default {f.default!r}; TRAIN_{f.name.upper()})".replace("%", "%%"),
        )
    return p


def params_from_args(ns: argparse.Namespace) -> TrainParams:
    """TrainParams from the flags; ContractError names the field."""
    env: dict[str, str] = {}
    for item in ns.env:
        name, sep, value = item.partition("=")
        if not sep:
            raise ContractError(f"env: expected NAME=VALUE, got {item!r}")
        env[name] = value
    data: dict[str, Any] = {
        "dataset": ns.dataset,
        "dataset_version": ns.version,
        "launcher": "docker" if ns.image else "local",
        "gpus": ns.gpus,
        "image": ns.image,
        "command": ns.command,
        "env": env,
        **{f.name: getattr(ns, f.name) for f in FIELDS if getattr(ns, f.name) is not None},
    }
    return TrainParams.from_mapping(data)


def new_run_id() -> str:
    return f"cli-{datetime.now(UTC):%Y%m%dT%H%M%S}-{secrets.token_hex(3)}"


def docker_run_argv(
    env: TrainerEnv,
    *,
    image: str,
    command: list[str] | None,
    run_id: str,
    gpus: int,
    host_data_root: str,
    checkpoint_url: str,
) -> list[str]:
    """``docker run`` for ``--image``: the same mounts and environment as the docker launcher.
    Variables are passed by name only (``-e NAME``): their values come from the docker
    client's environment, so a secret never shows in the process list."""
    from pipeline.orchestration.launchers import (
        CONTAINER_CHECKPOINTS,
        CONTAINER_DATA_ROOT,
        TRAINER_COMMAND,
        _container_env,
        _file_url_path,
        data_on_s3,
    )

    public = _container_env(env, checkpoint_url)
    argv = ["docker", "run", "--rm", "--name", f"laketrain-{run_id}"[:128], "--shm-size", "2g"]
    if not data_on_s3(env):  # an s3:// DATA_ROOT is read through the container's own cache
        argv += ["-v", f"{host_data_root}:{CONTAINER_DATA_ROOT}:ro"]
    if checkpoint_url.startswith("file://"):
        argv += ["-v", f"{_file_url_path(checkpoint_url)}:{CONTAINER_CHECKPOINTS}"]
    if gpus != 0:
        argv += ["--gpus", "all" if gpus < 0 else str(gpus)]
    for name in sorted({*public, *env.secret}):
        argv += ["-e", name]
    entry = list(command or TRAINER_COMMAND)
    return [*argv, "--entrypoint", entry[0], image, *entry[1:]]


def run(argv: Sequence[str], *, emit: Callable[[str], None] | None = None) -> int:
    """The ``laketrain train --command/--image`` entry: returns the exit code to exit with
    (the command's own, or 2 for bad flags)."""
    try:
        ns = _parser().parse_args(list(argv))
    except SystemExit as exc:  # argparse printed why
        return int(exc.code or 0)
    try:
        params = params_from_args(ns)
    except ContractError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return launch(params, run_id=ns.run_id or new_run_id(), emit=emit)


def launch(
    params: TrainParams,
    *,
    run_id: str,
    emit: Callable[[str], None] | None = None,
) -> int:
    """Run ``params`` (its command, or its image with docker) here as run ``run_id`` and
    record it: queued with what reproduces it (command, image, code version, lock), then the
    outcome from result.json or the exit status. Returns the exit code (3: no such version)."""
    from pipeline.datasets.reader import open_version
    from pipeline.orchestration import launchers, results, tasks
    from pipeline.orchestration.env_contract import command_argv
    from pipeline.orchestration.local_launcher import run_local
    from pipeline.orchestration.usercode import user_argv
    from pipeline.runs import record_run_started, repro
    from pipeline.settings import get_settings, project_root

    emit = _TailEmit(emit or (lambda line: print(line, flush=True)))
    try:
        # Resolved before launch: the command gets the id, never "latest" or a tag.
        reader = open_version(params.dataset, params.dataset_version)
    except (LookupError, ValueError) as exc:
        print(f"error: dataset_version: {exc}", file=sys.stderr)
        return 3
    version_id = reader.version_id
    settings = get_settings()
    print(f"RUN_ID={run_id} (rerun with --run-id {run_id} to resume it)", file=sys.stderr)
    command_words = (
        command_argv(params.command) if params.command else list(launchers.TRAINER_COMMAND)
    )
    row = record_run_started(
        run_id,
        params.dataset,
        version_id,
        params.to_dict(),
        launcher=params.launcher,
        status="queued",
        manifest_sha256=reader.manifest_sha256,
        command=command_words,
        image=params.image or None,
        **repro.here(),
    )
    print(f"run {row['name']} (RUN_ID {run_id})", file=sys.stderr)
    env = tasks.trainer_env(params, run_id=run_id, version_id=version_id)
    grace = launchers.LauncherConfig.from_env().kill_grace_seconds
    if params.image:
        from pipeline.orchestration.env_contract import basic_vars

        cfg = launchers.LauncherConfig.from_env()
        command = command_argv(params.command) if params.command else None
        argv_ = docker_run_argv(
            env,
            image=params.image,
            command=command,
            run_id=run_id,
            gpus=params.gpus,
            host_data_root=cfg.host_data_root or str(settings.data_root),
            checkpoint_url=settings.checkpoint_url,
        )
        import os

        # The docker client's own settings (which daemon), then the values `-e NAME` passes.
        client = {k: v for k, v in os.environ.items() if k in DOCKER_CLIENT_VARS}
        client_env = TrainerEnv(
            public={
                **basic_vars(),
                **client,
                **launchers._container_env(env, settings.checkpoint_url),
            },
            secret=dict(env.secret),
        )
        code = run_local(client_env, emit=emit, grace_seconds=grace, command=argv_)
        _record_image_digest(run_id, params.image, client_env.public)
    else:
        code = run_local(
            env,
            emit=emit,
            grace_seconds=grace,
            command=user_argv(params.command) if params.command else None,
            cwd=str(project_root()),
        )
    report = tasks.exit_report(params, code)
    if code != 0 and report.get("message") and emit.reason():
        # "exited with code 2 (bad config)" says little; the trainer's own last error says why.
        report = tasks.exit_report(params, code, error=f"{report['message']}: {emit.reason()}")
    outcome = results.record_finished(
        run_id,
        launch_failed=None if code == 0 else f"exit code {code}",
        exit_report=report,
    )
    print(f"run {row['name']} ({run_id}): {outcome['status']} (exit code {code})", file=sys.stderr)
    return code


def _record_image_digest(run_id: str, image: str, client_env: dict[str, str]) -> None:
    """The image's repo digest (``name@sha256:...``) as the docker client reports it, on the
    run; nothing when the client cannot tell (a local build has none, no daemon)."""
    import json
    import subprocess

    try:
        out = subprocess.run(
            ["docker", "image", "inspect", "--format", "{{json .RepoDigests}}", image],
            env=client_env,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        digests = json.loads(out.stdout) if out.returncode == 0 else None
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return
    if isinstance(digests, list) and digests and isinstance(digests[0], str):
        if "@sha256:" in digests[0]:
            from pipeline.runs import record_run_details

            record_run_details(run_id, image_digest=digests[0][:255])


class _TailEmit:
    """Passes the command's lines on, keeping the last ones: a failed run's record gets the
    command's own last error line."""

    def __init__(self, emit: Callable[[str], None], keep: int = 50) -> None:
        self.emit, self.keep, self.lines = emit, keep, []

    def __call__(self, line: str) -> None:
        self.emit(line)
        if line.strip():
            self.lines = [*self.lines[-(self.keep - 1) :], line.strip()]

    def reason(self) -> str | None:
        for line in reversed(self.lines):
            if "error" in line.lower() and not line.startswith("Traceback"):
                return line[:1000]
        return None
