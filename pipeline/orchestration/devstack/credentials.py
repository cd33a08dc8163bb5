"""Secrets the stack generates once and keeps under its home, readable by this user only:
a restart keeps sessions, tokens and the admin login valid."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

from pipeline.orchestration.devstack.config import ADMIN_USER


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` with mode 0600 from the first byte (created so, not chmod-ed
    after), via a temporary name so that a reader never sees half a secret."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def persisted_secret(path: Path, nbytes: int) -> str:
    """A random secret generated once and kept in ``path`` (mode 0600)."""
    if path.is_file():
        value = path.read_text().strip()
        if value:
            return value
    value = secrets.token_urlsafe(nbytes)
    write_private(path, value + "\n")
    return value


def admin_password(home: Path) -> str:
    """The admin password: generated once, kept in the simple auth manager's passwords file."""
    path = home / "simple_auth_manager_passwords.json"
    if path.is_file():
        try:
            data = json.loads(path.read_text())
            if isinstance(data, dict) and data.get(ADMIN_USER):
                return str(data[ADMIN_USER])
        except ValueError:
            pass
    password = secrets.token_urlsafe(12)
    write_private(path, json.dumps({ADMIN_USER: password}))
    return password
