"""The SQS watcher for an S3 lake, against a real moto_server: the bucket sends its own event
notifications to the queue (S3 -> SQS), the trigger turns one batch into one event listing the
datasets, and deletes the messages only after handing the event over."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.orchestration.sqs import datasets_from_messages, records_of
from pipeline.orchestration.trigger import SqsLakeTrigger
from tests.s3_fixtures import (
    TEST_ACCESS_KEY_ID,
    TEST_REGION,
    TEST_SECRET_ACCESS_KEY,
    set_aws_env,
    start_moto,
)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def s3_lake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[dict]:
    import boto3

    server = start_moto()
    try:
        set_aws_env(monkeypatch, server.endpoint, tmp_path)
        monkeypatch.delenv("AIRFLOW_CONN_AWS_DEFAULT", raising=False)
        session = boto3.session.Session()
        s3, sqs = session.client("s3"), session.client("sqs")
        s3.create_bucket(Bucket="lake-bucket")
        queue_url = sqs.create_queue(QueueName="laketrain-lake")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
        s3.put_bucket_notification_configuration(
            Bucket="lake-bucket",
            NotificationConfiguration={
                "QueueConfigurations": [
                    {
                        "QueueArn": arn,
                        "Events": ["s3:ObjectCreated:*", "s3:ObjectRemoved:*"],
                    }
                ]
            },
        )
        yield {"s3": s3, "sqs": sqs, "queue_url": queue_url, "endpoint": server.endpoint}
    finally:
        server.stop()


def drain_test_events(lake: dict) -> None:
    # S3 sends an s3:TestEvent when notifications are configured; it must not fire anything.
    trig = SqsLakeTrigger(
        queue_url=lake["queue_url"], lake_prefix="s3://lake-bucket/lake", wait_time_seconds=0
    )
    client = trig._client()
    event, receipts = trig.receive(client)
    assert event is None
    if receipts:
        client.delete_message_batch(QueueUrl=lake["queue_url"], Entries=receipts)


def test_object_events_become_one_event_with_the_datasets(s3_lake: dict) -> None:
    drain_test_events(s3_lake)
    s3 = s3_lake["s3"]
    for key in (
        "lake/digits/0/a.png",
        "lake/digits/1/b c.png",
        "lake/photos/x.jpg",
        "lake/digits/.hidden.png",
        "lake/digits/c.png.part",
        "other/digits/z.png",
        "lake/loose.txt",
    ):
        s3.put_object(Bucket="lake-bucket", Key=key, Body=b"x")
    s3.delete_object(Bucket="lake-bucket", Key="lake/photos/x.jpg")
    trig = SqsLakeTrigger(
        queue_url=s3_lake["queue_url"],
        lake_prefix="s3://lake-bucket/lake",
        max_messages=10,
        wait_time_seconds=1,
    )

    async def scenario():
        gen = trig.run()
        event = await asyncio.wait_for(gen.__anext__(), timeout=30)
        left_before_delete = _visible_or_inflight(s3_lake)
        nxt = asyncio.ensure_future(gen.__anext__())  # resumes: deletes, then polls again
        await asyncio.sleep(2.5)
        nxt.cancel()
        return event, left_before_delete

    event, left = asyncio.run(scenario())
    assert event.payload["datasets"] == ["digits", "photos"]
    assert {c["dataset"]: c["objects"] for c in event.payload["changes"]} == {
        "digits": 2,
        "photos": 2,
    }
    assert left > 0  # not deleted before the event was handed over
    assert _visible_or_inflight(s3_lake) == 0  # deleted after


def _visible_or_inflight(lake: dict) -> int:
    attrs = lake["sqs"].get_queue_attributes(
        QueueUrl=lake["queue_url"],
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return int(attrs["ApproximateNumberOfMessages"]) + int(
        attrs["ApproximateNumberOfMessagesNotVisible"]
    )


def test_credentials_come_from_the_airflow_connection(
    s3_lake: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    conn = {
        "conn_type": "aws",
        "login": TEST_ACCESS_KEY_ID,
        "password": TEST_SECRET_ACCESS_KEY,
        "extra": {"endpoint_url": s3_lake["endpoint"], "region_name": TEST_REGION},
    }
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", json.dumps(conn))
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")  # the environment would fail
    trig = SqsLakeTrigger(
        queue_url=s3_lake["queue_url"], lake_prefix="s3://lake-bucket/lake", wait_time_seconds=0
    )
    client = trig._client()
    assert client.meta.endpoint_url == s3_lake["endpoint"]
    trig.receive(client)  # reaches the server


def test_sns_wrapped_and_url_encoded_records() -> None:
    inner = {
        "Records": [
            {
                "eventName": "ObjectCreated:Put",
                "s3": {"bucket": {"name": "b"}, "object": {"key": "p/my+set/a%2Bb.png"}},
            }
        ]
    }
    sns = json.dumps({"Type": "Notification", "Message": json.dumps(inner)})
    assert records_of(sns)[0]["eventName"] == "ObjectCreated:Put"
    assert datasets_from_messages(
        [sns, "not json", json.dumps({"Event": "s3:TestEvent"})], "s3://b/p"
    ) == {"my set": 1}


def test_keys_whose_first_folder_is_not_a_dataset_name_are_ignored() -> None:
    def event(key: str) -> dict:
        return {
            "eventName": "ObjectCreated:Put",
            "s3": {"bucket": {"name": "b"}, "object": {"key": key}},
        }

    body = json.dumps(
        {"Records": [event("p//x.png"), event("p/_tmp/x.png"), event("p/digits/3/x.png")]}
    )
    assert datasets_from_messages([body], "s3://b/p") == {"digits": 1}


def test_serialize_round_trips_and_bad_arguments_name_the_field() -> None:
    trig = SqsLakeTrigger(queue_url="https://sqs/q", lake_prefix="s3://b/p", wait_time_seconds=5)
    path, kwargs = trig.serialize()
    assert path == "pipeline.orchestration.trigger.SqsLakeTrigger"
    assert SqsLakeTrigger(**kwargs).serialize() == (path, kwargs)
    with pytest.raises(ValueError, match="lake_prefix"):
        SqsLakeTrigger(queue_url="q", lake_prefix="/local")
    with pytest.raises(ValueError, match="wait_time_seconds"):
        SqsLakeTrigger(queue_url="q", lake_prefix="s3://b", wait_time_seconds=60)


def test_lake_ingest_uses_the_sqs_watcher_when_configured(tmp_path: Path) -> None:
    from tests.orchestration.test_dags_parse import parse

    dag = parse(
        REPO / "dags" / "lake_ingest.py",
        tmp_path,
        LAKETRAIN_LAKE_SQS_QUEUE_URL="https://sqs.eu-west-1.amazonaws.com/1/laketrain-lake",
        LAKETRAIN_LAKE_S3_PREFIX="s3://bucket/lake",
    )["dags"]["lake_ingest"]
    assert dag["watchers"] == [
        {
            "name": "lake_sqs_watcher",
            "trigger": [
                "pipeline.orchestration.trigger.SqsLakeTrigger",
                {
                    "queue_url": "https://sqs.eu-west-1.amazonaws.com/1/laketrain-lake",
                    "lake_prefix": "s3://bucket/lake",
                    "aws_conn_id": "aws_default",
                    "wait_time_seconds": 10,
                    "max_messages": 10,
                    "visibility_timeout": 120,
                },
            ],
        }
    ]


def test_a_queue_without_a_prefix_is_refused_at_parse_time(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "LAKETRAIN_LAKE_SQS_QUEUE_URL": "https://sqs/q",
        "LAKETRAIN_LAKE_S3_PREFIX": "",
        "PYTHONPATH": str(REPO),
    }
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "from pipeline.orchestration import dagconfig; dagconfig.sqs_watch()",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode != 0 and "LAKETRAIN_LAKE_S3_PREFIX" in out.stderr
