"""The SQS-based lake watcher, for a lake in S3: S3 event notifications → SQS → Airflow.

Polling a bucket with LIST requests every few seconds is slow and billed per request; S3 can
instead send an event for every created or removed object to an SQS queue. ``lake_asset_sqs``
builds the ``laketrain://lake`` asset watched by :class:`~pipeline.orchestration.trigger.SqsLakeTrigger`
(which must live in ``trigger.py``: the triggerer imports it by class path). ``lake_ingest``
uses it instead of the stat-polling watcher when ``LAKETRAIN_LAKE_SQS_QUEUE_URL`` is set.

Setup (once, per bucket), see README.md, "Orchestration":

    aws sqs create-queue --queue-name laketrain-lake
    aws s3api put-bucket-notification-configuration --bucket BUCKET --notification-configuration \
      '{"QueueConfigurations": [{"QueueArn": "arn:aws:sqs:REGION:ACCOUNT:laketrain-lake",
        "Events": ["s3:ObjectCreated:*", "s3:ObjectRemoved:*"],
        "Filter": {"Key": {"FilterRules": [{"Name": "prefix", "Value": "lake/"}]}}}]}'

The amazon provider's ``SqsSensorTrigger`` is also a ``BaseEventTrigger``, but it needs
aiobotocore, hands over raw messages (every dropped file would be one message in the DAG's
payload) and deletes them on reception, before the event is stored; this one reduces a batch to
the datasets it touched and deletes only after handing the event over.
"""

from __future__ import annotations

import json
import logging
from typing import Any
from urllib.parse import unquote_plus, urlsplit

from pipeline.orchestration.tasks import LAKE_ASSET_URI

log = logging.getLogger(__name__)

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


def lake_asset_sqs(
    queue_url: str,
    lake_prefix: str,
    *,
    aws_conn_id: str | None = "aws_default",
    wait_time_seconds: int = 10,
) -> Any:
    """The ``laketrain://lake`` asset, watched through SQS instead of stat polling."""
    from airflow.sdk import Asset, AssetWatcher

    from pipeline.orchestration.trigger import SqsLakeTrigger

    split_prefix(lake_prefix)  # fail at parse time with the value, not later in the triggerer
    return Asset(
        name=LAKE_ASSET_URI,
        uri=LAKE_ASSET_URI,
        watchers=[
            AssetWatcher(
                name="lake_sqs_watcher",
                trigger=SqsLakeTrigger(
                    queue_url=queue_url,
                    lake_prefix=lake_prefix,
                    aws_conn_id=aws_conn_id,
                    wait_time_seconds=wait_time_seconds,
                ),
            )
        ],
    )
