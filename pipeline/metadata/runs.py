"""Training models: runs and their checkpoints. Owned by the trainer work; created by 0003
(``training_runs.events`` by 0005; the reproducibility fields, ``run_attempts`` and
``model_aliases`` by 0008).

``training_runs.version_id`` is a plain indexed string, deliberately without a foreign key to
``dataset_versions``: the trainer can run on a version folder that this store never recorded
(``open_version`` works without a store), and recording such a run must not fail.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from pipeline.metadata.base import Base, UTCDateTime, utcnow

RUN_QUEUED = "queued"
RUN_RUNNING = "running"
RUN_SUCCEEDED = "succeeded"
RUN_FAILED = "failed"
RUN_PREEMPTED = "preempted"
RUN_STATUSES = (RUN_QUEUED, RUN_RUNNING, RUN_SUCCEEDED, RUN_FAILED, RUN_PREEMPTED)
RUN_FINAL_STATUSES = (RUN_SUCCEEDED, RUN_FAILED, RUN_PREEMPTED)


class TrainingRun(Base):
    """One training run; a retry (same run_id) updates this row and bumps ``attempts``."""

    __tablename__ = "training_runs"

    run_id: Mapped[str] = mapped_column(String(255), primary_key=True)
    dataset: Mapped[str] = mapped_column(String(255), index=True)
    version_id: Mapped[str] = mapped_column(String(64), index=True)
    params: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    status: Mapped[str] = mapped_column(String(16), default=RUN_RUNNING, index=True)
    best_metric: Mapped[float | None] = mapped_column(Float)
    metric_name: Mapped[str | None] = mapped_column(String(64))
    checkpoint_url: Mapped[str | None] = mapped_column(String(4096))
    dag_id: Mapped[str | None] = mapped_column(String(255))
    dag_run_id: Mapped[str | None] = mapped_column(String(255))
    launcher: Mapped[str | None] = mapped_column(String(32))
    attempts: Mapped[int] = mapped_column(Integer, default=1)
    error: Mapped[str | None] = mapped_column(Text)
    # [{time, level, message}] (migration 0005): e.g. "every checkpoint unusable, restarted".
    events: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON, nullable=True)
    # What reproduces the run (0008): a readable name, the version's manifest digest, the
    # command and image, the code and lock the trainer ran with. All nullable: runs recorded
    # before 0008, or by a trainer that cannot tell, simply lack them.
    name: Mapped[str | None] = mapped_column(String(255), unique=True)
    manifest_sha256: Mapped[str | None] = mapped_column(String(64))
    command: Mapped[list[str] | None] = mapped_column(JSON, nullable=True)
    image: Mapped[str | None] = mapped_column(String(1024))
    image_digest: Mapped[str | None] = mapped_column(String(255))
    # {"commit", "dirty", "package_version", "source": "git" | "package"}
    code_version: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    lock_sha256: Mapped[str | None] = mapped_column(String(64))
    # the trainer's resolved config (TrainConfig.to_dict(), or what a user's trainer reports)
    config: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    started_at: Mapped[datetime] = mapped_column(
        UTCDateTime, default=utcnow, doc="first attempt's start"
    )
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class Checkpoint(Base):
    """One committed checkpoint of a run; ``deleted_at`` is set when retention removed it."""

    __tablename__ = "checkpoints"
    __table_args__ = (UniqueConstraint("run_id", "step", name="uq_checkpoints_run_step"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[str] = mapped_column(
        ForeignKey("training_runs.run_id", ondelete="CASCADE"), index=True
    )
    step: Mapped[int] = mapped_column(BigInteger)
    epoch: Mapped[int | None] = mapped_column(Integer)
    url: Mapped[str] = mapped_column(String(4096))
    metric: Mapped[float | None] = mapped_column(Float)
    is_best: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    deleted_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class RunAttempt(Base):
    """One attempt of a run (a retry of the same run_id is attempt n+1): when, how it ended."""

    __tablename__ = "run_attempts"
    __table_args__ = (UniqueConstraint("run_id", "n", name="uq_run_attempts_run_n"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[str] = mapped_column(
        ForeignKey("training_runs.run_id", ondelete="CASCADE"), index=True
    )
    n: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16))
    launcher: Mapped[str | None] = mapped_column(String(32))
    started_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    exit_code: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text)


class ModelAlias(Base):
    """An alias (``champion``) moved onto a run of a dataset. Append-only: the newest row of
    a (dataset, alias) is the current holder, the older ones are the promotion history."""

    __tablename__ = "model_aliases"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    dataset: Mapped[str] = mapped_column(String(255), index=True)
    alias: Mapped[str] = mapped_column(String(64))
    run_id: Mapped[str] = mapped_column(
        ForeignKey("training_runs.run_id", ondelete="CASCADE"), index=True
    )
    by: Mapped[str] = mapped_column(String(255))
    at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
