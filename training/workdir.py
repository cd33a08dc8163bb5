"""The trainer's local scratch folder (``laketrain-run-*`` in the temp dir): checkpoint
snapshots, metrics.jsonl, the plot. The run removes it when it ends, on SIGTERM too; a trainer
killed outright (SIGKILL, the OOM killer) cannot, so each folder holds its owner's pid and the
next trainer to start on the machine removes the folders whose owner is gone."""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import tempfile
from pathlib import Path

log = logging.getLogger("training.workdir")

PREFIX = "laketrain-run-"
OWNER_FILE = "owner.json"


def _start_ticks(pid: int) -> str | None:
    """The process's start time in clock ticks (Linux ``/proc/<pid>/stat``), which tells a
    reused pid from the original owner; None where /proc is not there."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else None


def make_run_dir(parent: Path | None = None) -> Path:
    """A new ``laketrain-run-*`` folder with an owner file naming this process."""
    work = Path(tempfile.mkdtemp(prefix=PREFIX, dir=parent))
    owner = {"pid": os.getpid(), "host": socket.gethostname(), "start": _start_ticks(os.getpid())}
    (work / OWNER_FILE).write_text(json.dumps(owner) + "\n")
    return work


def _owner_alive(owner: dict) -> bool:
    pid = owner.get("pid")
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        return True  # not ours to judge: leave the folder alone
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, someone else's
    started = owner.get("start")
    now = _start_ticks(pid)
    return not (started and now and now != started)  # a different process got the pid


def remove_stale_run_dirs(parent: Path | None = None) -> list[Path]:
    """Remove the ``laketrain-run-*`` folders (of this user, on this host) whose owner process
    is gone; return them. A folder without an owner file is left alone: its trainer may be
    starting right now, or predate the owner file."""
    root = Path(parent) if parent is not None else Path(tempfile.gettempdir())
    host, uid = socket.gethostname(), os.getuid()
    removed = []
    for folder in sorted(root.glob(f"{PREFIX}*")):
        try:
            if folder.is_symlink() or not folder.is_dir() or folder.stat().st_uid != uid:
                continue
            owner = json.loads((folder / OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(owner, dict) or owner.get("host") != host or _owner_alive(owner):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        if not folder.exists():
            removed.append(folder)
            log.info("removed %s, left by trainer pid %s that is gone", folder, owner.get("pid"))
    return removed
