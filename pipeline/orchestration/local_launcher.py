"""Run the trainer as a local process: ``python -m training`` (or a user's command) as a child
in its own process group, with exactly the environment a container would get
(``env_contract.build_trainer_env``).

Its output is streamed line by line into the task log, and on any way out (task killed,
timeout, error) the whole process group is stopped: SIGTERM, a grace period in which the
trainer checkpoints and exits 75, then SIGKILL. The container launchers (Docker, Kubernetes)
live in ``launchers``.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

from pipeline.orchestration.env_contract import TrainerEnv
from pipeline.orchestration.usercode import EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND, not_found_message

log = logging.getLogger(__name__)


class LocalTrainer:
    """``python -m training`` as a child process in its own process group."""

    def __init__(
        self,
        env: TrainerEnv,
        *,
        python: str = sys.executable,
        cwd: str | None = None,
        grace_seconds: float = 30.0,
        command: list[str] | None = None,
    ) -> None:
        self.env = env
        self.argv = command or [python, "-m", "training"]
        self.cwd = cwd
        self.grace_seconds = grace_seconds
        self.proc: subprocess.Popen[str] | None = None
        self.killed_by: str | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        """Start the process; OSError when the command cannot be started (not found: the
        caller turns that into exit 127, as a shell would)."""
        self.proc = subprocess.Popen(
            self.argv,
            env=self.env.merged(),
            cwd=self.cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            encoding="utf-8",
            errors="replace",
            bufsize=1,
            start_new_session=True,  # its own process group: one killpg reaches its workers too
            preexec_fn=_die_with_parent,
        )
        log.info("trainer started: pid %d, %s", self.proc.pid, " ".join(self.argv[1:]))

    def stream(self, emit: Callable[[str], None]) -> int:
        """Forward every output line to ``emit`` until the process exits; return its code."""
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            emit(line.rstrip("\n"))
        return self.proc.wait()

    def terminate(self, reason: str = "terminated") -> None:
        """SIGTERM to the group, wait ``grace_seconds``, then SIGKILL. Safe to call twice and
        from a signal handler (the waiting happens in a thread)."""
        with self._lock:
            proc = self.proc
            if proc is None or proc.poll() is not None or self.killed_by is not None:
                return
            self.killed_by = reason
        log.warning("stopping the trainer (pid %d): %s", proc.pid, reason)
        _killpg(proc.pid, signal.SIGTERM)

        def reap() -> None:
            try:
                proc.wait(timeout=self.grace_seconds)
            except subprocess.TimeoutExpired:
                log.warning("trainer ignored SIGTERM for %.0fs: SIGKILL", self.grace_seconds)
                _killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            # Children that outlived the leader (data workers) go too.
            _killpg(proc.pid, signal.SIGKILL)

        threading.Thread(target=reap, name="trainer-reaper", daemon=True).start()

    def wait_stopped(self, timeout: float | None = None) -> int | None:
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None


def run_local(
    env: TrainerEnv,
    *,
    emit: Callable[[str], None] | None = None,
    grace_seconds: float = 30.0,
    python: str = sys.executable,
    cwd: str | None = None,
    command: list[str] | None = None,
    on_started: Callable[[LocalTrainer], None] | None = None,
) -> int:
    """Run the trainer to the end and return its exit code.

    While it runs, SIGTERM to this process (what Airflow sends a task it kills) stops the
    trainer's group first, then the previous handler runs (Airflow's, which calls on_kill).
    Leaving by an exception (a timeout) also stops it.
    """
    emit = emit or (lambda line: log.info("%s", line))
    trainer = LocalTrainer(
        env, python=python, cwd=cwd, grace_seconds=grace_seconds, command=command
    )
    previous = None
    in_main = threading.current_thread() is threading.main_thread()

    def on_term(signum: int, frame: Any) -> None:
        trainer.terminate(f"signal {signal.Signals(signum).name}")
        if callable(previous) and previous not in (signal.SIG_IGN, signal.SIG_DFL):
            previous(signum, frame)

    if in_main:
        previous = signal.signal(signal.SIGTERM, on_term)
    try:
        try:
            trainer.start()
        except FileNotFoundError:
            emit(f"error: command not found: {trainer.argv[0]!r} (exit 127)")
            return EXIT_NOT_FOUND
        except PermissionError:
            emit(f"error: command cannot be executed: {trainer.argv[0]!r} (exit 126)")
            return EXIT_NOT_EXECUTABLE
        if on_started:
            on_started(trainer)
        code = trainer.stream(emit)
        if message := not_found_message(trainer.argv, code):
            emit(f"error: {message}")
        if trainer.killed_by:
            # Output ends when the leader exits; let the reaper finish the group.
            trainer.wait_stopped(timeout=grace_seconds + 5)
        return code
    except BaseException:
        trainer.terminate("the task stopped")
        trainer.wait_stopped(timeout=grace_seconds + 5)
        raise
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


def _killpg(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _die_with_parent() -> None:
    # If the task process itself is SIGKILLed (no handler runs), the kernel still sends the
    # trainer SIGTERM, so it checkpoints and exits instead of running on as an orphan.
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        except Exception:
            pass
