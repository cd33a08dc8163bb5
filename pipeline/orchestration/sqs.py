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

import logging
from typing import Any

# Re-exported: the message parsing lives in s3events, which trigger.py imports too.
from pipeline.orchestration.s3events import (
    IGNORED_SUFFIXES,
    datasets_from_messages,
    records_of,
    split_prefix,
)
from pipeline.orchestration.tasks import LAKE_ASSET_URI

log = logging.getLogger(__name__)

__all__ = [
    "IGNORED_SUFFIXES",
    "datasets_from_messages",
    "lake_asset_sqs",
    "records_of",
    "split_prefix",
]


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
