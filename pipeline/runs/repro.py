"""What reproduces a run, measured where it runs: the code version (the git commit of the
laketrain checkout and whether it has uncommitted changes, or the installed package's version)
and the sha256 of ``requirements.lock``; and the comparison of a recorded run's values with
this machine's, for ``laketrain reproduce``'s warnings. Stdlib only: the trainer calls it."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path
from typing import Any

PACKAGE = "laketrain"
LOCK_FILE = "requirements.lock"
GIT_TIMEOUT_S = 10


def code_root() -> Path:
    """The folder holding the ``pipeline`` and ``training`` packages (a checkout's root, or
    site-packages for an installed laketrain)."""
    return Path(__file__).resolve().parents[2]


def _git(root: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(root), *args],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None  # no git on this machine (a container): the package version says it
    return out.stdout if out.returncode == 0 else None


def package_version() -> str | None:
    try:
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version(PACKAGE)
        except PackageNotFoundError:
            return None
    except Exception:
        return None


def code_version(root: Path | None = None) -> dict[str, Any]:
    """``{"source": "git", "commit", "dirty", "package_version"}`` when ``root`` (default
    code_root()) is the top of a git work tree; ``{"source": "package", "commit": None,
    "dirty": None, "package_version"}`` otherwise. ``dirty``: tracked files differ from the
    commit (untracked files do not count: scratch files are not code that ran)."""
    root = (root or code_root()).resolve()
    pkg = package_version()
    top = _git(root, "rev-parse", "--show-toplevel")
    if top is not None and Path(top.strip()).resolve() == root:
        commit = (_git(root, "rev-parse", "HEAD") or "").strip() or None
        status = _git(root, "status", "--porcelain", "--untracked-files=no")
        if commit:
            return {
                "source": "git",
                "commit": commit,
                "dirty": bool(status.strip()) if status is not None else None,
                "package_version": pkg,
            }
    return {"source": "package", "commit": None, "dirty": None, "package_version": pkg}


def lock_sha256(root: Path | None = None) -> str | None:
    """sha256 of ``requirements.lock`` beside the code (None when there is none)."""
    path = (root or code_root()) / LOCK_FILE
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def here() -> dict[str, Any]:
    """The reproducibility fields this process can tell about itself."""
    return {"code_version": dict(code_version()), "lock_sha256": lock_sha256()}


def differences(recorded: dict[str, Any], now: dict[str, Any] | None = None) -> list[str]:
    """Warnings, one line each, where ``recorded`` (a run row) and this machine differ in code
    version or lock; empty when they agree or the run recorded neither."""
    now = now or here()
    out: list[str] = []
    rc, nc = recorded.get("code_version") or {}, now.get("code_version") or {}
    if rc:
        if rc.get("commit") and rc.get("commit") != nc.get("commit"):
            out.append(
                f"code version differs: the run used commit {str(rc['commit'])[:12]}, "
                f"this checkout is {str(nc.get('commit') or 'not a git checkout')[:12]}"
            )
        elif rc.get("dirty"):
            out.append(
                "code version: the run's checkout had uncommitted changes; "
                "the same commit may not be the same code"
            )
        if not rc.get("commit") and rc.get("package_version") != nc.get("package_version"):
            out.append(
                f"package version differs: the run used laketrain {rc.get('package_version')},"
                f" this is {nc.get('package_version')}"
            )
    if recorded.get("lock_sha256") and recorded["lock_sha256"] != now.get("lock_sha256"):
        out.append(
            f"requirements.lock differs: the run's sha256 {recorded['lock_sha256'][:12]}, "
            f"here {(now.get('lock_sha256') or 'no lock file')[:12]}"
        )
    return out


def process_command(argv: list[str] | None = None) -> list[str]:
    """This process's command as a launcher would write it: ``python -m training ...`` for the
    built-in trainer, ``python <script> ...`` for a trainer of one's own."""
    import sys

    argv = list(sys.argv if argv is None else argv)
    if not argv:
        return ["python"]
    script = Path(argv[0])
    if script.name == "__main__.py" and script.parent.name == "training":
        return ["python", "-m", "training", *argv[1:]]
    return ["python", *argv]
