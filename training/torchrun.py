"""Several training processes on one machine: ``python -m training`` starts itself again under
torchrun's launcher (``torch.distributed.run``, standalone rendezvous, no restarts: the
orchestrator retries) when the run wants more than one process, i.e. TRAIN_NPROC, or by default
one process per visible GPU. A container given four GPUs therefore trains on four, with the same
command and environment as a single-GPU one.

torchrun reports any worker failure as exit 1. The orchestrator needs the trainer's own codes
(2 bad config and 3 data refused: no retry; 75 stopped after a checkpoint: retry resumes), so each
worker leaves its exit code in a folder named by ``EXIT_DIR_ENV`` and the launcher exits with the
most telling of them.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from training.config import ConfigError, TrainConfig
from training.exit_codes import EXIT_CONFIG, EXIT_DATA, EXIT_FAILED, EXIT_OK, EXIT_PREEMPTED

log = logging.getLogger("training.torchrun")

EXIT_DIR_ENV = "LAKETRAIN_WORKER_EXIT_DIR"
LAUNCHER_PID_ENV = "LAKETRAIN_LAUNCHER_PID"


def is_worker() -> bool:
    """True inside a process that torchrun (ours or the user's) started."""
    return "LOCAL_RANK" in os.environ or int(os.environ.get("WORLD_SIZE", "1")) > 1


def processes_wanted(cfg: TrainConfig) -> int:
    """TRAIN_NPROC when set; else one per visible GPU (1 on CPU or with TRAIN_DEVICE=cpu).
    More processes than visible GPUs on a CUDA run is a config error (each rank takes a GPU of
    its own), raised here rather than as a CUDA error in every worker."""
    if cfg.runtime.device == "cpu":
        return cfg.runtime.nproc or 1
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if cfg.runtime.nproc > max(gpus, 1) and gpus:
        raise ConfigError(
            f"TRAIN_NPROC / nproc: {cfg.runtime.nproc} processes, but {gpus} GPU(s) are "
            "visible (one process per GPU; set TRAIN_DEVICE=cpu for gloo processes)"
        )
    return cfg.runtime.nproc or max(1, gpus)


def combined_exit_code(codes: Sequence[int]) -> int:
    """One exit code for the run from the workers' codes: a refusal that every retry would meet
    again (2, 3) first, then a clean preemption (75, only if no worker failed otherwise), then
    failure. A worker without a code (killed before it could write one) counts as failed."""
    if not codes:
        return EXIT_FAILED
    for code in (EXIT_CONFIG, EXIT_DATA):
        if code in codes:
            return code
    if all(c == EXIT_OK for c in codes):
        return EXIT_OK
    if all(c in (EXIT_OK, EXIT_PREEMPTED) for c in codes):
        return EXIT_PREEMPTED
    return EXIT_FAILED


def die_with_launcher() -> None:
    """In a worker of our launcher: be killed when the launcher dies. torchrun starts each
    worker in a session of its own, so a launcher killed outright (SIGKILL, an OOM kill) would
    otherwise leave its workers running, holding the GPUs, with nobody to collect them. A
    graceful stop needs none of this: torchrun passes SIGTERM on itself. Linux only."""
    if not (os.environ.get(EXIT_DIR_ENV) and is_worker()) or not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0) != 0:
        log.warning(
            "could not tie this worker to its launcher (prctl errno %d)", ctypes.get_errno()
        )
        return
    if str(os.getppid()) != os.environ.get(LAUNCHER_PID_ENV):
        os.kill(os.getpid(), signal.SIGKILL)  # the launcher died before prctl took effect


def record_exit_code(code: int) -> None:
    """Called by a worker as it exits: leave its code for the launcher (no-op otherwise)."""
    folder = os.environ.get(EXIT_DIR_ENV)
    if folder and is_worker():
        rank = os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0"))
        tmp = Path(folder) / f".{rank}.tmp"
        try:
            tmp.write_text(str(code))
            os.replace(tmp, Path(folder) / rank)
        except OSError:  # the launcher and its folder are gone: nobody to tell
            pass


def launch(nproc: int, argv: Sequence[str]) -> int:
    """Run ``python -m training ARGV`` as ``nproc`` torchrun workers; the combined exit code."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    if not logging.getLogger().handlers:  # the workers set up their own (training/train.py)
        logging.basicConfig(
            level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
    log.info("starting %d training processes under torchrun (standalone)", nproc)
    with tempfile.TemporaryDirectory(prefix="laketrain-exit-") as folder:
        previous = os.environ.get(EXIT_DIR_ENV)
        os.environ[EXIT_DIR_ENV] = folder  # the workers inherit the launcher's environment
        os.environ[LAUNCHER_PID_ENV] = str(os.getpid())  # their parent: torchrun runs in-process
        launcher_error: BaseException | None = None
        try:
            run(
                parse_args(
                    [
                        "--standalone",
                        f"--nproc-per-node={nproc}",
                        "--max-restarts=0",
                        "-m",
                        "training",
                        *argv,
                    ]
                )
            )
        except (ChildFailedError, SignalException) as exc:
            # SIGTERM to the launcher: torchrun has passed it on to the workers and waited for
            # them, so their codes (75 once their checkpoint is written) are in the folder.
            launcher_error = exc
        finally:
            os.environ.pop(LAUNCHER_PID_ENV, None)
            if previous is None:
                os.environ.pop(EXIT_DIR_ENV, None)
            else:
                os.environ[EXIT_DIR_ENV] = previous
        codes = _read_codes(Path(folder), nproc)
    if isinstance(launcher_error, ChildFailedError):
        failed = {rank: f.exitcode for rank, f in sorted(launcher_error.failures.items())}
        log.warning("torchrun: workers failed (rank: exit code): %s", failed)
    elif launcher_error is not None:
        log.warning("torchrun stopped by a signal: %s", launcher_error)
    code = combined_exit_code(codes)
    log.info("workers exited with %s: exit %d", codes, code)
    return code


def _read_codes(folder: Path, nproc: int) -> list[int]:
    codes = []
    for rank in range(nproc):
        try:
            codes.append(int((folder / str(rank)).read_text()))
        except (OSError, ValueError):
            codes.append(EXIT_FAILED)  # killed before it could say
    return codes
