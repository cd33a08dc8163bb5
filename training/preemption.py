"""SIGTERM, the orchestrator's "stop now": inside the training loop a flag checked between
steps (the step in flight finishes, a checkpoint is saved, exit 75), outside it an exception
that unwinds the run cleanly."""

from __future__ import annotations

import logging
import signal
from typing import Any, Self

import torch

log = logging.getLogger("training")


class StopRequested(Exception):
    """SIGTERM arrived; a checkpoint of the finished step has been saved (exit code 75)."""


class _SigtermHandler:
    """Installs ``_handle`` for SIGTERM and puts the previous handler back on ``uninstall``."""

    _previous: Any = None

    def _handle(self, signum: int, frame: Any) -> None:
        raise NotImplementedError

    def install(self) -> Self:
        self._previous = signal.signal(signal.SIGTERM, self._handle)
        return self

    def uninstall(self) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None


class Preemption(_SigtermHandler):
    """Turns SIGTERM into a flag the loop checks between steps: the step in flight finishes,
    then the loop saves and stops with exit 75 (the public API's preemption helper; the
    built-in loop checks it the same way). A second SIGTERM does the same (no hard exit
    mid-save). ``install()``/``uninstall()``, or use it as a context manager.

    Under DDP the signal may reach one rank only, or the ranks at different steps:
    ``should_stop()`` is the flag OR-ed over all ranks (one tiny collective), so every rank
    stops after the same step and takes part in the same last checkpoint."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None

    def _handle(self, signum: int, frame: Any) -> None:
        self.requested = True
        log.warning("SIGTERM received: finishing the current step, then saving a checkpoint")

    def __enter__(self) -> Preemption:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.uninstall()

    def should_stop(self) -> bool:
        """True on every rank once any rank got SIGTERM (call it at the same step on all)."""
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
            return self.requested
        flag = torch.tensor([float(self.requested)])
        if dist.get_backend() == "nccl":
            flag = flag.cuda()
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())


class TermSignal(BaseException):
    """SIGTERM outside the training loop (exit code 75, like StopRequested). A BaseException on
    purpose: library code that wraps any Exception (botocore turns one raised inside its HTTP
    call into an HTTPClientError) must not turn the stop into an ordinary failure."""


class RaiseOnTerm(_SigtermHandler):
    """Outside the training loop a SIGTERM has no step to finish: while armed it raises
    TermSignal at once, so the run unwinds (its temp folder removed, result.json written)
    instead of dying where it stands. Disarmed while the run writes its outputs: those are
    short, and the orchestrator's kill after its grace period still ends the process."""

    def __init__(self) -> None:
        self.armed = True
        self._previous: Any = None

    def _handle(self, signum: int, frame: Any) -> None:
        if self.armed:
            self.armed = False  # one exception; a second SIGTERM must not hit the cleanup
            raise TermSignal("stopped by SIGTERM outside the training loop (setting up or loading)")
        log.warning("SIGTERM received while writing the run's outputs: finishing them first")
