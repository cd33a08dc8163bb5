#!/usr/bin/env python3
"""Write `.env` for docker compose from `.env.example`: absolute host paths, this user's uid,
the docker socket's group and fresh random secrets. Standard library only (runs before any
venv exists). An existing `.env` is never overwritten unless --force is given.

    python3 docker/init_env.py [--output .env] [--data-root DIR] [--force]
"""

from __future__ import annotations

import argparse
import base64
import os
import secrets
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# Each secret and how it is made. Hex keeps passwords safe inside URLs
# (postgresql://user:PASSWORD@host) without escaping.
SECRETS = {
    "AIRFLOW_ADMIN_PASSWORD": lambda: secrets.token_hex(12),
    "AIRFLOW_FERNET_KEY": lambda: base64.urlsafe_b64encode(secrets.token_bytes(32)).decode(),
    "AIRFLOW_JWT_SECRET": lambda: secrets.token_hex(48),  # 96 bytes: Airflow wants >= 64
    "AIRFLOW_API_SECRET_KEY": lambda: secrets.token_hex(32),
    "POSTGRES_PASSWORD": lambda: secrets.token_hex(16),
    "LAKETRAIN_DB_PASSWORD": lambda: secrets.token_hex(16),
    "MINIO_ROOT_PASSWORD": lambda: secrets.token_hex(16),
}


def docker_gid(socket: Path = Path("/var/run/docker.sock")) -> str:
    try:
        return str(socket.stat().st_gid)
    except OSError:
        return "0"  # no daemon here yet: root's group, fix by hand if the socket appears


def render(example: str, values: dict[str, str]) -> str:
    """The example's text with each `KEY=` line's value replaced where `values` has the key;
    comments and order are kept, so `.env` stays readable beside `.env.example`."""
    out = []
    for line in example.splitlines():
        key, sep, _ = line.partition("=")
        if sep and not line.lstrip().startswith("#") and key.strip() in values:
            line = f"{key.strip()}={values[key.strip()]}"
        out.append(line)
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--output", type=Path, default=REPO / ".env")
    p.add_argument("--example", type=Path, default=REPO / ".env.example")
    p.add_argument("--data-root", type=Path, default=REPO / "var" / "data")
    p.add_argument("--force", action="store_true", help="replace an existing output file")
    args = p.parse_args(argv)

    if args.output.exists() and not args.force:
        print(f"{args.output} exists; kept as it is (use --force to regenerate it)")
        return 0
    data_root = args.data_root.resolve()
    # Created now, as this user: a folder docker creates for a bind mount belongs to root.
    # (The lake is a MinIO bucket, created by the stack's minio-init.)
    data_root.mkdir(parents=True, exist_ok=True)
    values = {
        "LAKETRAIN_HOST_DATA_ROOT": str(data_root),
        "AIRFLOW_UID": str(os.getuid()),
        "DOCKER_GID": docker_gid(),
        **{key: make() for key, make in SECRETS.items()},
    }
    text = render(args.example.read_text(), values)
    tmp = args.output.with_name(args.output.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # secrets: owner only
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, args.output)
    print(f"wrote {args.output} (data root {data_root}); secrets not shown")
    return 0


if __name__ == "__main__":
    sys.exit(main())
