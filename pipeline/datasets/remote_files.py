"""The version files of an ``s3://`` DATA_ROOT, read without a store: which versions are
published (a ``manifest.json`` object under ``datasets/<dataset>/<id>/``, the publisher's
last write), their manifests, and the dataset's ``HEAD`` object (``manifest.py`` describes
both; ``publish.py`` writes them)."""

from __future__ import annotations

import json

from pipeline.datasets import manifest as mf
from pipeline.datasets.publish import s3_store
from pipeline.storage.urls import join


def dataset_url(remote: str, dataset: str) -> str:
    return join(remote, "datasets", dataset)


def version_url(remote: str, dataset: str, version_id: str) -> str:
    return join(remote, mf.version_relpath(dataset, version_id))


def datasets(remote: str) -> list[str]:
    """Every dataset with at least one published version under the data root."""
    base = join(remote, "datasets") + "/"
    out = set()
    for url in s3_store().list(join(remote, "datasets")):
        parts = url[len(base) :].split("/")
        if len(parts) == 3 and parts[2] == mf.MANIFEST and not parts[1].startswith("."):
            out.add(parts[0])
    return sorted(out)


def version_ids(remote: str, dataset: str) -> list[str]:
    """The ids of the dataset's published versions (those with a manifest), sorted."""
    base = dataset_url(remote, dataset) + "/"
    out = []
    for url in s3_store().list(dataset_url(remote, dataset)):
        parts = url[len(base) :].split("/")
        if len(parts) == 2 and parts[1] == mf.MANIFEST and not parts[0].startswith("."):
            out.append(parts[0])
    return sorted(out)


def read_manifest(remote: str, dataset: str, version_id: str) -> tuple[dict, bytes]:
    """The manifest of a published version and its bytes; ManifestError naming the URL."""
    found = find_manifest(remote, dataset, version_id)
    if found is None:
        url = join(version_url(remote, dataset, version_id), mf.MANIFEST)
        raise mf.ManifestError(f"{url}: no such object; not a published version")
    return found


def find_manifest(remote: str, dataset: str, version_id: str) -> tuple[dict, bytes] | None:
    """As ``read_manifest``, with None for a version that is not published (no manifest):
    one GET that both says whether the version exists and reads it."""
    url = join(version_url(remote, dataset, version_id), mf.MANIFEST)
    try:
        raw = s3_store().read_bytes(url)
    except FileNotFoundError:
        return None
    try:
        manifest = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise mf.ManifestError(f"{url}: not valid JSON ({exc})") from None
    mf.check_format_version(manifest, url)
    return manifest, raw


def manifest_fields(remote: str, dataset: str, version_id: str) -> dict:
    """A published manifest as a dict; {} when it is unreadable (it then matches by id only,
    and opening it names what is wrong)."""
    try:
        return read_manifest(remote, dataset, version_id)[0]
    except (mf.ManifestError, FileNotFoundError):
        return {}


def read_head(remote: str, dataset: str) -> dict | None:
    """The dataset's HEAD object, or None when there is none; a damaged one is an error
    naming its URL (as ``manifest.read_head``)."""
    url = join(dataset_url(remote, dataset), mf.HEAD)
    try:
        raw = s3_store().read_bytes(url)
    except FileNotFoundError:
        return None
    try:
        head = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise mf.ManifestError(f"{url}: not valid JSON ({exc})") from None
    if not isinstance(head, dict) or not isinstance(head.get("version_id"), str):
        raise mf.ManifestError(f"{url}: no 'version_id' in the dataset's HEAD object")
    if head.get("format_version") != mf.HEAD_FORMAT_VERSION:
        raise mf.ManifestError(
            f"{url}: HEAD format_version {head.get('format_version')!r} is not supported by "
            f"this laketrain (it reads {mf.HEAD_FORMAT_VERSION}); upgrade laketrain to read it"
        )
    return head
