"""S3 event notifications read as lake changes: which datasets a batch of SQS messages touched.

Shared by the SQS trigger (``trigger.SqsLakeTrigger``, which the triggerer imports by class
path) and ``sqs.lake_asset_sqs`` (which builds the asset around that trigger): before this
module, each of ``sqs.py`` and ``trigger.py`` imported the other.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import unquote_plus, urlsplit

IGNORED_SUFFIXES = (".tmp", ".part")


def split_prefix(lake_prefix: str) -> tuple[str, str]:
    parts = urlsplit(lake_prefix)
    if parts.scheme != "s3" or not parts.netloc:
        raise ValueError(f"lake_prefix must be s3://bucket/prefix, got {lake_prefix!r}")
    prefix = parts.path.lstrip("/")
    return parts.netloc, (prefix.rstrip("/") + "/") if prefix else ""


def records_of(body: str) -> list[dict[str, Any]]:
    """The S3 event records of one SQS message body (direct, or wrapped by SNS)."""
    try:
        data = json.loads(body)
    except ValueError:
        return []
    if (
        isinstance(data, dict)
        and isinstance(data.get("Message"), str)
        and data.get("Type") == "Notification"
    ):
        return records_of(data["Message"])
    if not isinstance(data, dict):
        return []
    records = data.get("Records")
    return [r for r in records if isinstance(r, dict)] if isinstance(records, list) else []


def datasets_from_messages(bodies: list[str], lake_prefix: str) -> dict[str, int]:
    """{dataset: number of object events} for the events under ``lake_prefix``. Test events,
    other buckets/prefixes, hidden or partial names and keys outside a dataset folder are
    ignored (the ingest scan reports those from the ledger)."""
    bucket, prefix = split_prefix(lake_prefix)
    out: dict[str, int] = {}
    for body in bodies:
        for rec in records_of(body):
            name = str(rec.get("eventName", ""))
            if not name.startswith(
                ("ObjectCreated", "ObjectRemoved", "s3:ObjectCreated", "s3:ObjectRemoved")
            ):
                continue
            s3 = rec.get("s3") or {}
            if (s3.get("bucket") or {}).get("name") != bucket:
                continue
            key = unquote_plus(
                str((s3.get("object") or {}).get("key", ""))
            )  # keys arrive URL-encoded
            if not key.startswith(prefix):
                continue
            parts = key[len(prefix) :].split("/")
            if (
                len(parts) < 2
                or any(p.startswith(".") for p in parts)
                or parts[-1].endswith(IGNORED_SUFFIXES)
            ):
                continue
            if not _is_dataset_name(parts[0]):
                continue  # "a//b", "_x/...": never a dataset the ingest would build
            out[parts[0]] = out.get(parts[0], 0) + 1
    return out


def _is_dataset_name(name: str) -> bool:
    from pipeline.datasets.recipes import DatasetNameError, check_dataset_name

    try:
        check_dataset_name(name)
    except DatasetNameError:
        return False
    return True
