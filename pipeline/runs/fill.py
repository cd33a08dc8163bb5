"""The reproducibility fields a run's start may carry (checked), and the ones the store fills
itself: the readable name, the manifest digest from the version's row, the argv from the
launcher's ``command`` param."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select

from pipeline.metadata.runs import TrainingRun
from pipeline.runs.names import run_name

# What a launcher or the trainer may add to the run's reproducibility record; None = not known
# (the row keeps what an earlier call recorded).
RECORD_FIELDS = (
    "manifest_sha256",
    "command",
    "image",
    "image_digest",
    "code_version",
    "lock_sha256",
    "config",
)
LAUNCHER_FIELDS = ("command", "image", "image_digest")


def _record_fields(record: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(record) - set(RECORD_FIELDS))
    if unknown:
        raise TypeError(f"unknown run record field(s): {', '.join(unknown)}")
    out = {k: v for k, v in record.items() if v is not None}
    if "command" in out and not (
        isinstance(out["command"], list) and all(isinstance(a, str) for a in out["command"])
    ):
        raise ValueError(f"command must be a list of strings (argv), got {out['command']!r}")
    for key in ("code_version", "config"):
        if key in out and not isinstance(out[key], dict):
            raise ValueError(f"{key} must be a dict, got {type(out[key]).__name__}")
    return out


def _command_from_params(params: dict) -> dict[str, Any]:
    """A launcher's params name the command as shell words (the train form's ``command``):
    record them as the argv when the launcher gave no argv of its own."""
    import shlex

    command = params.get("command")
    if not isinstance(command, str) or not command.strip():
        return {}
    try:
        return {"command": shlex.split(command)}
    except ValueError:
        return {}


def _manifest_sha256(session: Any, version_id: str) -> str | None:
    """The version's manifest digest, when the store has the version (a run on a folder it
    never saw has none to copy)."""
    from pipeline.metadata.datasets import DatasetVersion

    return session.execute(
        select(DatasetVersion.manifest_sha256).where(DatasetVersion.version_id == version_id)
    ).scalar_one_or_none()


def _next_name(session: Any, dataset: str, version_id: str) -> str:
    """The next free readable name for a run of this version (counter = runs on it + 1)."""
    n = session.execute(
        select(func.count())
        .select_from(TrainingRun)
        .where(TrainingRun.dataset == dataset, TrainingRun.version_id == version_id)
    ).scalar_one()
    while True:
        n += 1
        name = run_name(dataset, version_id, n)
        taken = session.execute(select(TrainingRun.run_id).where(TrainingRun.name == name)).first()
        if taken is None:
            return name
