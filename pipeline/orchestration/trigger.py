"""The lake watcher: a ``BaseEventTrigger`` that polls the lake with stat only (a folder) or
with one listing per poll (an ``s3://`` lake).

It lives in an importable package (not in ``dags/``) because the triggerer imports triggers by
class path and never sees the dags folder.

Every ``poll_seconds`` it walks the lake (``walk_lake``: ``os.scandir`` + stat, no file is
opened or hashed) and reduces each dataset folder to a fingerprint: a hash of the sorted
(path, size, mtime_ns, ctime_ns, inode) of its settled files. A dataset whose fingerprint moved
since the last event is *changed*. One scan that saw settled changes yields ONE event whose
payload lists the changed datasets; the fingerprints are then saved in the asset state store,
so a triggerer restart neither misses files dropped while it was down (their fingerprint differs
from the saved one) nor re-fires old ones (it equals it).

The event is only a doorbell: ``lake_ingest`` works from the hash ledger, so a collapsed,
duplicated or lost event never loses or double-processes a file (the hourly reconcile run
catches a lost one).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

STATE_KEY = "fingerprints"
STATE_FORMAT = 1


class LakeUnlistable(OSError):
    """The lake root itself could not be listed (unmounted volume...): not a deletion."""


def lake_fingerprints(
    lake: str | Path, settle_seconds: float, reader: Any = None
) -> tuple[dict[str, dict[str, Any]], set[str], set[str]]:
    """Stat-only fingerprints of every dataset of ``lake``; of an ``s3://`` lake, from one
    listing (:func:`s3_lake_lines`; ``reader`` a LakeReader to reuse).

    Returns ``({dataset: {"fp": hex, "files": n}}, datasets_with_settling_files,
    datasets_partly_unlistable)``. Blocking: call it through ``asyncio.to_thread``.
    """
    from pipeline.lake.walk import Candidate, Refused, Settling, Unlistable, walk_lake
    from pipeline.storage.urls import is_s3

    if is_s3(str(lake)):
        return _digest(s3_lake_lines(str(lake), reader)), set(), set()
    if not Path(lake).is_dir():
        raise LakeUnlistable(f"lake folder does not exist: {lake}")
    settling: set[str] = set()
    unlistable: set[str] = set()
    entries = []
    for entry in walk_lake(Path(lake), settle_seconds=settle_seconds):
        if isinstance(entry, Candidate):
            k = entry.key
            entries.append(
                (entry.path, f"{entry.path}\0{k.size}\0{k.mtime_ns}\0{k.ctime_ns}\0{k.inode}")
            )
        elif isinstance(entry, Settling):
            settling.add(entry.path.split("/", 1)[0])
        elif isinstance(entry, Refused) and "/" in entry.path:
            # A refused file (a symlink out of the lake...) still counts as a change: ingest
            # records the refusal in the ledger, where people look for it.
            entries.append((entry.path, f"{entry.path}\0refused"))
        elif isinstance(entry, Unlistable):
            if entry.path == "":
                raise LakeUnlistable(entry.reason)
            unlistable.add(entry.path.split("/", 1)[0])
    return _digest(entries), settling, unlistable


def _digest(entries: list[tuple[str, str]]) -> dict[str, dict[str, Any]]:
    """{dataset: {"fp": hash of its sorted lines, "files": n}} of (lake path, line) pairs."""
    digests: dict[str, Any] = {}
    counts: dict[str, int] = {}
    entries.sort()
    for path, line in entries:
        dataset = path.split("/", 1)[0]
        h = digests.get(dataset)
        if h is None:
            h = digests[dataset] = hashlib.blake2b(digest_size=16)
        h.update(line.encode("utf-8", "surrogateescape"))
        h.update(b"\n")
        counts[dataset] = counts.get(dataset, 0) + 1
    return {d: {"fp": h.hexdigest(), "files": counts[d]} for d, h in digests.items()}


def s3_lake_lines(lake: str, reader: Any = None) -> list[tuple[str, str]]:
    """The listing mode, for a lake in S3 without SQS (MinIO): ONE paginated listing of the
    whole lake prefix per poll, nothing read. Each object the scan would look at is a line
    (key, size, ETag, LastModified), so any PUT, overwrite or delete moves its dataset's
    fingerprint. A PUT is atomic, so nothing settles. A listing that fails after its retries
    is LakeUnlistable: not an emptied lake."""
    from pipeline.lake.s3walk import is_ignored_key, segment_problem
    from pipeline.storage.errors import StorageError
    from pipeline.storage.listing import LakeReader, prefix_of

    _, prefix = prefix_of(lake)
    try:
        objects = list((reader or LakeReader()).objects(lake))
    except StorageError as exc:
        raise LakeUnlistable(str(exc)) from exc
    lines = []
    for o in objects:
        rel = o.key[len(prefix) :]
        dataset = rel.split("/", 1)[0]
        if "/" not in rel or not dataset or dataset.startswith((".", "_")):
            continue  # outside a dataset folder: the scan reports it, nothing to ingest
        if rel.endswith("/") and o.size == 0:
            continue  # a console's "folder" marker
        if segment_problem(rel) is None and is_ignored_key(rel):
            continue
        # A refused key is a line too: ingest records the refusal where people look for it.
        lines.append((rel, f"{rel}\0{o.size}\0{o.etag}\0{o.mtime_ns}"))
    return lines


def diff_fingerprints(
    previous: dict[str, dict[str, Any]], current: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    """The datasets whose fingerprint moved (including ones that appeared or vanished)."""
    changes = []
    for name in sorted(set(previous) | set(current)):
        before, after = previous.get(name), current.get(name)
        if (before or {}).get("fp") == (after or {}).get("fp"):
            continue
        changes.append(
            {
                "dataset": name,
                "files": (after or {}).get("files", 0),
                "previous_files": (before or {}).get("files", 0),
            }
        )
    return changes


class LakeTrigger(BaseEventTrigger):
    """Fire when a lake dataset's settled files changed.

    :param lake: the lake root: a local folder, or ``s3://bucket/prefix`` (listing mode: one
        LIST pass of the lake per poll, a fingerprint per dataset prefix; for S3-compatible
        stores without SQS, such as MinIO).
    :param poll_seconds: seconds between two looks (``LAKETRAIN_POLL_SECONDS``; the DAG's
        default is 30 for an S3 lake, 1 for a folder).
    :param settle_seconds: files modified more recently are not ready (same rule as the scan).
    :param max_defer_seconds: a dataset still receiving files (some are settling) is held back
        so that a burst of copies becomes one event, but never longer than this.
    """

    def __init__(
        self,
        lake: str,
        poll_seconds: float = 1.0,
        settle_seconds: float = 2.0,
        max_defer_seconds: float = 30.0,
    ) -> None:
        super().__init__()
        if poll_seconds <= 0:
            raise ValueError(f"poll_seconds must be > 0, got {poll_seconds!r}")
        if settle_seconds < 0:
            raise ValueError(f"settle_seconds must be >= 0, got {settle_seconds!r}")
        self.lake = str(lake)
        self.poll_seconds = float(poll_seconds)
        self.settle_seconds = float(settle_seconds)
        self.max_defer_seconds = float(max_defer_seconds)
        self._memory_state: dict[str, Any] = {}  # used only when no asset state store is injected
        self._deferred_since: dict[str, float] = {}
        self._pending_state: dict[str, Any] = {}
        self._reader: Any = None  # one S3 client for every poll of an S3 lake

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "lake": self.lake,
                "poll_seconds": self.poll_seconds,
                "settle_seconds": self.settle_seconds,
                "max_defer_seconds": self.max_defer_seconds,
            },
        )

    async def _load_state(self) -> dict[str, dict[str, Any]]:
        if self.asset_state_store is None:
            state = self._memory_state.get(STATE_KEY)
        else:
            state = await self.asset_state_store.aget(STATE_KEY, None)
        if (
            not isinstance(state, dict)
            or state.get("format") != STATE_FORMAT
            or state.get("lake") != self.lake
        ):
            # No state (first start) or another lake: every dataset counts as changed, which
            # is a harmless extra ingest (the ledger knows what is really new).
            return {}
        return dict(state.get("datasets") or {})

    async def _save_state(self, datasets: dict[str, dict[str, Any]]) -> None:
        state = {"format": STATE_FORMAT, "lake": self.lake, "datasets": datasets}
        if self.asset_state_store is None:
            self._memory_state[STATE_KEY] = state
        else:
            await self.asset_state_store.aset(STATE_KEY, state)

    async def poll_once(self) -> TriggerEvent | None:
        """One stat walk: an event when settled changes are ready, else None. State is saved
        by the caller after the event was handed over (see run)."""
        started = time.perf_counter()
        if self._reader is None and self.lake.startswith("s3://"):
            from pipeline.storage.listing import LakeReader

            self._reader = LakeReader()
        current, settling, unlistable = await asyncio.to_thread(
            lake_fingerprints, self.lake, self.settle_seconds, self._reader
        )
        saved = await self._load_state()
        for name in unlistable:
            # A folder we could not list is unknown, not emptied: keep its last fingerprint.
            if name in saved:
                current[name] = saved[name]
            else:
                current.pop(name, None)
        changes = diff_fingerprints(saved, current)
        now = time.monotonic()
        ready = []
        for change in changes:
            name = change["dataset"]
            if name in settling:
                first = self._deferred_since.setdefault(name, now)
                if now - first < self.max_defer_seconds:
                    continue  # more files are on their way: wait for the burst to land
            self._deferred_since.pop(name, None)
            ready.append(change)
        if not ready:
            return None
        # Only the fired datasets take their new fingerprint; held-back ones keep the old one
        # so they fire once their copies settle.
        new_state = dict(saved)
        for change in ready:
            name = change["dataset"]
            if name in current:
                new_state[name] = current[name]
            else:
                new_state.pop(name, None)
        self._pending_state = new_state
        return TriggerEvent(
            {
                "lake": self.lake,
                "datasets": [c["dataset"] for c in ready],
                "changes": ready,
                "walk_seconds": round(time.perf_counter() - started, 4),
            }
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        self.log.info(
            "watching lake %s every %.1fs (%s)",
            self.lake,
            self.poll_seconds,
            "one listing per poll"
            if self.lake.startswith("s3://")
            else f"settle {self.settle_seconds:.1f}s",
        )
        while True:
            try:
                event = await self.poll_once()
            except LakeUnlistable as exc:
                # No lake yet, or an unmounted volume: nothing to compare until it is back.
                self.log.warning("lake not listable, waiting: %s", exc)
                event = None
            if event is not None:
                self.log.info("lake changed: %s", ", ".join(event.payload["datasets"]))
                yield event
                # Saved only after the event was handed to the triggerer: a crash in between
                # re-fires (harmless, ingest is idempotent) instead of missing a change.
                await self._save_state(self._pending_state)
            await asyncio.sleep(self.poll_seconds)


class SqsLakeTrigger(BaseEventTrigger):
    """Fire on S3 event notifications delivered to an SQS queue (S3 → SQS, or S3 → SNS → SQS).

    For a lake in S3, listing the bucket every few seconds costs requests and money; S3 tells
    the queue instead. Each receive (long poll) that brought object events yields ONE event
    with the datasets they touched (the first path component under ``lake_prefix``); the
    messages are deleted only after the event was handed over (at-least-once: a crash re-fires,
    which ingest absorbs, rather than losing a change). The hourly reconcile run of
    ``lake_ingest`` still catches anything a lost notification hid.

    :param queue_url: the SQS queue S3 notifies.
    :param lake_prefix: ``s3://bucket/prefix`` of the lake; other keys are ignored.
    :param aws_conn_id: Airflow connection for the credentials; boto3's environment if absent.
    """

    def __init__(
        self,
        queue_url: str,
        lake_prefix: str,
        aws_conn_id: str | None = "aws_default",
        wait_time_seconds: int = 10,
        max_messages: int = 10,
        visibility_timeout: int = 120,
    ) -> None:
        super().__init__()
        if not lake_prefix.startswith("s3://"):
            raise ValueError(f"lake_prefix must be s3://bucket/prefix, got {lake_prefix!r}")
        if not 0 <= wait_time_seconds <= 20:
            raise ValueError(
                f"wait_time_seconds must be 0..20 (SQS long poll), got {wait_time_seconds}"
            )
        if not 1 <= max_messages <= 10:
            raise ValueError(f"max_messages must be 1..10, got {max_messages}")
        self.queue_url = queue_url
        self.lake_prefix = lake_prefix
        self.aws_conn_id = aws_conn_id
        self.wait_time_seconds = int(wait_time_seconds)
        self.max_messages = int(max_messages)
        self.visibility_timeout = int(visibility_timeout)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "queue_url": self.queue_url,
                "lake_prefix": self.lake_prefix,
                "aws_conn_id": self.aws_conn_id,
                "wait_time_seconds": self.wait_time_seconds,
                "max_messages": self.max_messages,
                "visibility_timeout": self.visibility_timeout,
            },
        )

    def _client(self) -> Any:
        import boto3

        from pipeline.orchestration.env_contract import aws_credentials

        creds = aws_credentials(self.aws_conn_id) if self.aws_conn_id else {}
        kwargs: dict[str, Any] = {}
        for var, arg in (
            ("AWS_ACCESS_KEY_ID", "aws_access_key_id"),
            ("AWS_SECRET_ACCESS_KEY", "aws_secret_access_key"),
            ("AWS_SESSION_TOKEN", "aws_session_token"),
            ("AWS_ENDPOINT_URL", "endpoint_url"),
            ("AWS_DEFAULT_REGION", "region_name"),
        ):
            if creds.get(var):
                kwargs[arg] = creds[var]
        return boto3.session.Session().client("sqs", **kwargs)

    def receive(self, client: Any) -> tuple[TriggerEvent | None, list[dict[str, str]]]:
        """One long poll: (an event or None, the receipts to delete). Blocking."""
        from pipeline.orchestration.s3events import datasets_from_messages

        resp = client.receive_message(
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=self.max_messages,
            WaitTimeSeconds=self.wait_time_seconds,
            VisibilityTimeout=self.visibility_timeout,
        )
        messages = resp.get("Messages", [])
        receipts = [
            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)
        ]
        changes = datasets_from_messages([m.get("Body", "") for m in messages], self.lake_prefix)
        if not changes:
            return None, receipts  # test events, other prefixes, ignored names: just consume
        return (
            TriggerEvent(
                {
                    "lake": self.lake_prefix,
                    "datasets": sorted(changes),
                    "changes": [{"dataset": d, "objects": n} for d, n in sorted(changes.items())],
                }
            ),
            receipts,
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        self.log.info("watching %s through SQS %s", self.lake_prefix, self.queue_url)
        client = await asyncio.to_thread(self._client)
        while True:
            try:
                event, receipts = await asyncio.to_thread(self.receive, client)
            except Exception as exc:  # throttling, a network blip: retry, never die
                self.log.warning("SQS receive failed, retrying: %s", exc)
                await asyncio.sleep(5)
                continue
            if event is not None:
                self.log.info("lake changed: %s", ", ".join(event.payload["datasets"]))
                yield event
            if receipts:
                await asyncio.to_thread(
                    client.delete_message_batch, QueueUrl=self.queue_url, Entries=receipts
                )
