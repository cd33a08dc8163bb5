"""
### lake_ingest — new files in the lake become new dataset versions

Runs when the lake watcher sees settled changes (asset `laketrain://lake`), and every hour as a
reconcile that catches anything an event missed.

1. **scan** — stat every lake file, hash only new or changed ones into the ledger; the log lists
   the summary and every refused, unreadable or invalid file. It takes no conf (a run triggered
   with one fails here, naming the keys).
2. **plan** — per dataset, the files the ledger has that no processed sample covers yet, in shards.
3. **process** — one mapped task per shard (runs in parallel); idempotent.
4. **commit** — one mapped task per dataset: publishes a new version, or nothing when the
   content did not change; the process and commit logs name every rejected file (path and
   reason, the first 50); each new version is an asset event on `laketrain://datasets/<name>`
   with `{dataset, version_id, tag, samples, added, removed}`. A version the recipe's
   `[quality]` rules hold is published `quarantined`: not `latest`, no event.
5. **approve** — one Required Action per held version whose recipe asks for approval
   (`quality.approval`): *Approve* makes it `latest` and fires its event (auto-training
   starts), *Reject* keeps it quarantined with the reason given. No answer within
   `LAKETRAIN_APPROVAL_TIMEOUT_S` (default an hour) leaves it undecided; the next run asks again.

The DAG works from the ledger, never from the event payload: a collapsed, duplicated or missed
event never loses a file or processes one twice. One ingest runs at a time; every step is safe
to retry.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from airflow.sdk import (
    Asset,
    AssetAlias,
    AssetOrTimeSchedule,
    AssetWatcher,
    CronTriggerTimetable,
    Metadata,
    Param,
    dag,
    task,
)

from pipeline.orchestration import dagconfig
from pipeline.orchestration.approval import response_timeout
from pipeline.orchestration.approval_operator import VersionApprovalOperator
from pipeline.orchestration.tasks import DATASET_ALIAS, LAKE_ASSET_URI
from pipeline.orchestration.trigger import LakeTrigger

if (sqs := dagconfig.sqs_watch()) is not None:
    # An S3 lake: S3 event notifications in SQS replace the stat polling.
    from pipeline.orchestration.sqs import lake_asset_sqs

    lake = lake_asset_sqs(queue_url=sqs[0], lake_prefix=sqs[1])
else:
    lake = Asset(
        name=LAKE_ASSET_URI,
        uri=LAKE_ASSET_URI,
        watchers=[
            AssetWatcher(
                name="lake_watcher",
                trigger=LakeTrigger(
                    lake=dagconfig.lake_dir(),
                    poll_seconds=dagconfig.poll_seconds(),
                    settle_seconds=dagconfig.settle_seconds(),
                ),
            )
        ],
    )
versions = AssetAlias(DATASET_ALIAS)


@dag(
    dag_id=Path(__file__).stem,
    doc_md=__doc__,
    schedule=AssetOrTimeSchedule(
        timetable=CronTriggerTimetable("@hourly", timezone="UTC"), assets=lake
    ),
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 2, "retry_delay": timedelta(seconds=10)},
    tags=["laketrain"],
)
def lake_ingest():
    @task
    def scan(**context) -> list[str]:
        from airflow.sdk.exceptions import AirflowFailException

        from pipeline.orchestration.ingest_tasks import scan_lake
        from pipeline.orchestration.refusals import RunRefused, check_conf_keys

        try:
            # It reads no conf: a {"dataset": ...} would be ignored without a word.
            check_conf_keys(context["dag_run"].conf, (), dag_id="lake_ingest")
        except RunRefused as exc:
            raise AirflowFailException(str(exc)) from None
        return scan_lake()["datasets"]

    @task
    def plan(datasets: list[str]) -> list[dict]:
        from pipeline.orchestration.ingest_tasks import plan_shards

        return plan_shards(datasets)

    @task(map_index_template="{{ task.op_kwargs['shard']['dataset'] }}")
    def process(shard: dict) -> dict:
        from pipeline.orchestration.ingest_tasks import process_shard

        return process_shard(shard)

    # none_failed: with no shard to process (only deletions, or nothing new), process is
    # skipped and the commit still runs.
    @task(
        outlets=[versions],
        trigger_rule="none_failed",
        map_index_template="{{ task.op_kwargs['dataset'] }}",
    )
    def commit(dataset: str, segments: list[dict] | None = None):
        from pipeline.orchestration.ingest_tasks import commit_dataset
        from pipeline.orchestration.tasks import dataset_asset_uri

        # One slice request: iterating the lazy XCom sequence would probe past its end (an
        # "XCom not found" error line in the log for nothing).
        extra = commit_dataset(dataset, list(segments[:]) if segments else [])
        if extra is not None:
            uri = dataset_asset_uri(dataset)
            yield Metadata(Asset(name=uri, uri=uri), extra=extra, alias=versions)

    @task(trigger_rule="none_failed")
    def held(datasets: list[str]) -> list[dict]:
        """The held versions that wait for a person (the approve step's mapped kwargs)."""
        from pipeline.orchestration.approval import pending_reviews

        return pending_reviews(datasets)

    datasets = scan()
    segments = process.expand(shard=plan(datasets))
    committed = commit.partial(segments=segments).expand(dataset=datasets)
    reviews = held(datasets)
    committed >> reviews
    # Retrying would ask the person again: a run that fails here is asked again by the next.
    VersionApprovalOperator.partial(
        task_id="approve",
        outlets=[versions],
        retries=0,
        response_timeout=response_timeout(),
        params={
            "reason": Param(
                "",
                type="string",
                title="Reason",
                description="Why (recorded with the decision; give one to reject).",
            )
        },
    ).expand_kwargs(reviews)


lake_ingest()
