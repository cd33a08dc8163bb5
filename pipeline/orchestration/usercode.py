"""A user's own trainer: its command line, and what the shell's exit codes 126/127 mean.

Any command that honours the environment contract (docs/trainer-contract.md) is a trainer; the
launchers run it like the built-in one. No Airflow here: ``laketrain train --command`` uses it.
"""

from __future__ import annotations

import signal
import sys

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_CONFIG = 2
EXIT_DATA_REFUSED = 3
EXIT_TEMPFAIL = 75  # stopped by SIGTERM after a checkpoint: a retry resumes
EXIT_NOT_EXECUTABLE = 126  # the shell's words: found but cannot be run
EXIT_NOT_FOUND = 127  # the shell's words: command not found


def user_argv(command: str, *, python: str = sys.executable) -> list[str]:
    """A user's command line for the LOCAL launcher: shell words (no shell runs it), and a
    leading ``python``/``python3`` is this worker's interpreter, so ``python my_train.py``
    finds the packages the worker has rather than whatever ``python`` PATH names first."""
    from pipeline.orchestration.env_contract import command_argv

    argv = command_argv(command)
    if argv[0] in ("python", "python3"):
        argv[0] = python
    return argv


def not_found_message(argv: list[str], code: int) -> str | None:
    """What an exit code of 126/127 means for the command ``argv``, else None."""
    if code == EXIT_NOT_FOUND:
        return f"command not found: {argv[0]!r} (exit 127)"
    if code == EXIT_NOT_EXECUTABLE:
        return f"command cannot be executed: {argv[0]!r} (exit 126)"
    return None


def exit_message(command: str, code: int | None) -> str | None:
    """The run record's words for a command's exit code (None for 0)."""
    if code == EXIT_OK:
        return None
    if code is None:
        return f"{command}: the launch failed before an exit code was known"
    if code < 0:
        return f"{command}: killed by signal {signal.Signals(-code).name}"
    from pipeline.orchestration.env_contract import ContractError, command_argv

    try:
        argv = command_argv(command)
    except ContractError:
        argv = [command]
    if found := not_found_message(argv, code):
        return found
    words = {
        EXIT_BAD_CONFIG: "bad config",
        EXIT_DATA_REFUSED: "data refused",
        EXIT_TEMPFAIL: "stopped after a checkpoint",
    }
    return f"{command}: exited with code {code}" + (f" ({words[code]})" if code in words else "")


class TrainerExit(RuntimeError):
    """The trainer exited with a code other than 0; ``retry`` says whether a retry can help."""

    def __init__(self, code: int, retry: bool, message: str) -> None:
        super().__init__(message)
        self.code, self.retry = code, retry


def exit_outcome(code: int) -> None:
    """Map the trainer's exit code (the contract) to the task's outcome: return on 0; raise
    AirflowFailException (no retry) on a bad config or refused data; raise a plain error
    (Airflow retries) on a SIGTERM stop (75, it resumes from its checkpoint) or a crash."""
    if code == EXIT_OK:
        return
    messages = {
        EXIT_BAD_CONFIG: "bad training config (exit 2): see the trainer's message above",
        EXIT_DATA_REFUSED: "the trainer refused the data (exit 3): see its message above",
        EXIT_TEMPFAIL: "the trainer stopped after a checkpoint (exit 75): a retry resumes from it",
    }
    message = messages.get(code, f"the trainer failed with exit code {code}")
    if code in (EXIT_NOT_FOUND, EXIT_NOT_EXECUTABLE):
        # The shell's codes: a retry would run the same missing command again.
        message = (
            f"the command was not found (exit {code}): see the error line above"
            if code == EXIT_NOT_FOUND
            else f"the command cannot be executed (exit {code}): see the error line above"
        )
    if code in (EXIT_BAD_CONFIG, EXIT_DATA_REFUSED, EXIT_NOT_FOUND, EXIT_NOT_EXECUTABLE):
        from airflow.sdk.exceptions import AirflowFailException

        raise AirflowFailException(message)
    if code < 0:
        message = f"the trainer was killed by signal {signal.Signals(-code).name}"
    raise TrainerExit(code, True, message)
