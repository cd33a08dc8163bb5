"""One training run end to end: open the version, check it, resume from the newest valid
checkpoint, fit, then write the plot, the diagnosis, metrics.jsonl and result.json beside the
checkpoints, and record the run in the metadata store when METADATA_DB_URL is set.

It goes through the public API (training.api) like any user's trainer: `open_version`,
`checkpoints` (the CheckpointManager), `RunReport` (metrics, result.json, store rows) and
`Preemption` (SIGTERM); the Trainer trains on a `VersionDataset`.

Exit codes (the orchestrator's contract): 0 done; 2 bad config; 3 data check refused;
75 stopped by SIGTERM after a checkpoint (a retry resumes); 1 anything else.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import traceback
from pathlib import Path
from typing import Any

import torch

from pipeline.redact import redact_text
from pipeline.settings import SettingsError
from training import api
from training.config import ConfigError, TrainConfig
from training.contract import RunTarget
from training.device import resolve_device
from training.distributed import (
    DistInfo,
    barrier,
    init_distributed,
    shutdown,
)
from training.exit_codes import (  # noqa: F401 - re-exported: the contract
    EXIT_CONFIG,
    EXIT_DATA,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_PREEMPTED,
)
from training.guards import (
    DataCheckError,
    NonFiniteLossError,
    check_label_distribution,
    refuse_leakage,
)
from training.loop import Trainer, result_summary
from training.losses import LOWER_IS_BETTER
from training.preemption import RaiseOnTerm, StopRequested, TermSignal
from training.recorder import RunReport
from training.resume import RunEvents, resume_state
from training.workdir import make_run_dir, remove_stale_run_dirs

log = logging.getLogger("training")


class RedactingFormatter(logging.Formatter):
    """Every log line, tracebacks included, with URL credentials masked (a store error may
    quote METADATA_DB_URL whole)."""

    def format(self, record: logging.LogRecord) -> str:
        return redact_text(super().format(record))


def setup_logging(rank: int) -> None:
    level = logging.INFO if rank == 0 else logging.WARNING
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        RedactingFormatter(
            f"%(asctime)s %(levelname)s [rank {rank}] %(name)s: %(message)s"
            if rank
            else "%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
    )
    logging.basicConfig(level=level, handlers=[handler], force=True)


def open_reader(target: RunTarget, version: str | None = None) -> Any:
    """The version's reader; a missing or ambiguous version is a data refusal (exit 3)."""
    try:
        return api.open_version(
            target.dataset, version or target.version, data_root=target.data_root
        )
    except (LookupError, FileNotFoundError) as exc:
        raise DataCheckError(f"dataset version: {exc}") from exc


def run(cfg: TrainConfig, target: RunTarget) -> int:
    """Train; return the process exit code."""
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    setup_logging(int(os.environ.get("RANK", "0")))
    try:
        device = resolve_device(cfg.runtime.device, local_rank)
    except ConfigError as exc:
        log.error("%s", exc)
        return EXIT_CONFIG
    dist = init_distributed(device.type)
    setup_logging(dist.rank)
    try:
        return _run(cfg, target, device, dist)
    finally:
        shutdown(dist)


def _run(cfg: TrainConfig, target: RunTarget, device: torch.device, dist: DistInfo) -> int:
    if target.metadata_db_url and os.environ.get("METADATA_DB_URL") != target.metadata_db_url:
        # --metadata-db-url: the reader and pipeline.runs read the store URL from settings.
        from pipeline.settings import get_settings

        os.environ["METADATA_DB_URL"] = target.metadata_db_url
        get_settings.cache_clear()

    report: RunReport | None = None
    events = RunEvents()
    manager: Any = None
    trainer: Trainer | None = None
    status, error, code = "failed", None, EXIT_FAILED
    fit = None
    term = RaiseOnTerm().install()
    work: Path | None = None
    try:
        # Folders of trainers killed outright on this machine; then this run's own, removed
        # in the finally below (SIGTERM included, see RaiseOnTerm).
        remove_stale_run_dirs()
        work = make_run_dir()
        report = RunReport(
            None,
            run_id=target.run_id,
            dataset=target.dataset,
            metadata_db_url=target.metadata_db_url,
            rank=dist.rank,
            metrics_path=work / "metrics.jsonl",
            metric_name=cfg.checkpoint.metric,
            # The manager ranks higher-is-better; a loss is handed to it negated.
            higher_is_better=cfg.checkpoint.metric not in LOWER_IS_BETTER,
        )
        events = report.events
        report.epoch_of = lambda step: step // max(trainer.steps_per_epoch, 1) if trainer else 0
        try:
            manager = api.checkpoints(
                target.checkpoint_url,
                target.run_id,
                keep_last=cfg.checkpoint.keep_last,
                rank=dist.rank,
                local_dir=work / "snapshots",
            )
            report.attach(manager)
            # The manager first: even a refused version leaves a result.json for the launcher.
            reader = open_reader(target)
            state = resume_state(cfg, manager, dist, events)
            if state is not None:
                saved = (state.get("dataset") or {}).get("version_id")
                if saved and saved != reader.version_id:
                    # A retry of DATASET_VERSION=latest after a new version landed: the run
                    # continues on the data it started with.
                    log.warning(
                        "resuming on version %s (the run's own), not %s", saved, reader.version_id
                    )
                    reader = open_reader(target, saved)
            if cfg.data.check_leakage:
                refuse_leakage(reader)
            regression = getattr(reader, "task", "classification") == "regression"
            if cfg.data.check_labels and not regression:  # a regressor's targets have no classes
                check_label_distribution(reader)
            train_r, val_r = reader.split("train"), reader.split("val")
            if regression and len(train_r) < 2:
                raise DataCheckError(
                    f"dataset version {reader.version_id}: a regression needs at least 2 train "
                    f"samples (train {len(train_r)})"
                )
            if not regression and (len(train_r) == 0 or len(reader.classes) < 2):
                raise DataCheckError(
                    f"dataset version {reader.version_id}: needs a non-empty train split and at least 2 classes "
                    f"(train {len(train_r)} samples, classes {list(reader.classes)})"
                )
            _check_val_split(reader, len(val_r), cfg, events)
            dataset_info = {
                "name": reader.dataset,
                "version_id": reader.version_id,
                "tag": reader.tag,
                "manifest_sha256": reader.manifest_sha256,
                "modality": reader.modality,
                "classes": list(reader.classes),
                **({"task": "regression"} if regression else {}),
            }
            info = {"dataset": dataset_info, "run_id": target.run_id}
            log.info("config: %s", json.dumps(cfg.to_dict(), sort_keys=True))
            log.info(
                "dataset %s version %s (%s), manifest sha256 %s; train %d, val %d samples; torch %s on %s, %d process(es)",
                reader.dataset,
                reader.version_id,
                reader.tag,
                reader.manifest_sha256,
                len(train_r),
                len(val_r),
                torch.__version__,
                device,
                dist.world_size,
            )
            trainer = Trainer(
                cfg,
                train_r,
                val_r,
                device=device,
                dist=dist,
                save_fn=lambda state, *, step, epoch, metric, is_best: manager.save(
                    step, state, metric=metric, is_best=is_best
                ),
                info=info,
                report=report,
            )
            # A regressor asked for val_accuracy ranks by val_rmse (the Trainer decides).
            report.metric_name = trainer.metric_name
            report.higher_is_better = trainer.metric_name not in LOWER_IS_BETTER
            if state is not None:
                if state.get("config") and state["config"] != cfg.to_dict():
                    diffs = _config_diff(TrainConfig.from_dict(state["config"]).flat(), cfg.flat())
                    log.warning(
                        "resuming with a config that differs from the checkpoint's: %s", diffs
                    )
                trainer.load_state_dict(state)
                log.info(
                    "resumed from step %d (epoch %d, batch %d of %d)",
                    trainer.step,
                    trainer.epoch,
                    trainer.data.cursor // trainer.data.global_batch,
                    trainer.steps_per_epoch,
                )
            log.info(
                "model %s: %.2f M parameters; amp %s; grad checkpointing %s; channels_last %s; %d steps/epoch, warmup %d of %d",
                trainer.arch,
                sum(p.numel() for p in trainer.model.parameters()) / 1e6,
                trainer.plan.mode,
                f"{trainer.segments} segments" if trainer.segments else "off",
                trainer.channels_last,
                trainer.steps_per_epoch,
                trainer.warmup,
                trainer.total_steps,
            )
            report.start(reader.version_id, {**cfg.flat(), "world_size": dist.world_size})
            with api.Preemption() as flag:
                trainer.stop_flag = flag
                fit = trainer.fit()
            status, code = "succeeded", EXIT_OK
        except (ConfigError, SettingsError) as exc:
            error, code = str(exc), EXIT_CONFIG
        except DataCheckError as exc:
            error, code = str(exc), EXIT_DATA
        except (StopRequested, TermSignal) as exc:
            status, error, code = "preempted", str(exc), EXIT_PREEMPTED
        except NonFiniteLossError as exc:
            error, code = str(exc), EXIT_FAILED
        except Exception as exc:
            error, code = f"{type(exc).__name__}: {exc}", EXIT_FAILED
            log.error("%s", traceback.format_exc())
        term.armed = False  # the outputs below are short: let them be written
        if error:
            error = redact_text(error)
            log.error("%s", error) if code != EXIT_PREEMPTED else log.warning("%s", error)
        code = _finish(report, trainer, work, status, error, code, fit, dist)
        return code
    finally:
        term.uninstall()
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)


def _check_val_split(reader: Any, n_val: int, cfg: TrainConfig, events: RunEvents) -> None:
    """An empty val split trains a model nobody measured (best_metric null, no best
    checkpoint): refused unless TRAIN_ALLOW_NO_VAL=true."""
    if n_val:
        return
    what = f"dataset version {reader.version_id} ({reader.tag}) has an empty val split"
    if not cfg.data.allow_no_val:
        raise DataCheckError(
            f"{what}: no val metric and no best checkpoint would come out of this run. Give "
            f"the dataset a val split (recipes/{reader.dataset}.toml: [split] val_fraction > 0, "
            "or more samples), build a new version and train on it, or set "
            "TRAIN_ALLOW_NO_VAL=true to train without validation"
        )
    events.warning(f"{what}; training without validation (TRAIN_ALLOW_NO_VAL=true)")


def _config_diff(old: dict[str, Any], new: dict[str, Any]) -> str:
    return (
        ", ".join(
            f"{k}: {old.get(k)!r} -> {new.get(k)!r}"
            for k in sorted(new)
            if old.get(k) != new.get(k)
        )
        or "none"
    )


def _finish(
    report: RunReport | None,
    trainer: Trainer | None,
    work: Path | None,
    status: str,
    error: str | None,
    code: int,
    fit: Any,
    dist: DistInfo,
) -> int:
    """Outputs and the result, whatever happened: the plot and the diagnosis, then the report
    (metrics.jsonl, result.json, the store's run row). A checkpoint upload error turns a
    success into a failure: a run whose checkpoints are not safe has not finished."""
    from training.diagnostics import diagnose, render
    from training.plot import plot_metrics

    if report is None:
        return code
    manager = report.manager
    findings: list[dict[str, Any]] = []
    if trainer is not None and dist.is_main and manager is not None and work is not None:
        try:
            records = trainer.metrics.records
            found = diagnose(records)
            findings = [f.to_dict() for f in found]
            for f in found:
                log.warning("diagnosis [%s] %s", f.rule, f.message)
            diag = work / "diagnosis.json"
            diag.write_text(
                json.dumps({"findings": findings, "text": render(found)}, indent=2) + "\n"
            )
            manager.upload_file("diagnosis.json", diag)
            if records:
                png = plot_metrics(
                    records, work / "curves.png", title=f"{manager.run_id}: {trainer.arch}"
                )
                manager.upload_file("curves.png", png)
        except Exception:
            log.exception("writing the run's plot/diagnosis failed")
    summary = (
        result_summary(fit)
        if fit is not None
        else {
            "best_metric": trainer.best_metric if trainer else None,
            "metric_name": trainer.metric_name if trainer else None,
            "epochs_done": trainer.epoch if trainer else 0,
            "steps": trainer.step if trainer else 0,
        }
    )
    extra: dict[str, Any] = {"findings": findings}
    if trainer is not None:
        extra["final_val"] = dict(trainer.last_val)
        extra["dataset"] = trainer.info.get("dataset")
    code = report.finish(status, error=error, exit_code=code, **summary, **extra)
    if dist.is_main and report.result is not None and manager is not None:
        print(json.dumps({"result": report.result}), flush=True)
    barrier(dist) if code in (EXIT_OK, EXIT_PREEMPTED) else None
    return code
