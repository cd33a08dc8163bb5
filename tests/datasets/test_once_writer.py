"""OnceWriter: content-addressed files written once, synced and renamed in batches."""

from __future__ import annotations

import pytest

from pipeline.datasets.once_writer import OnceWriter
from pipeline.storage.durable import TEMP_PREFIX


def test_files_appear_whole_after_close_and_an_existing_name_is_reused(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "kept").write_bytes(b"old")
    out = OnceWriter()
    assert out.add(tmp_path / "a" / "kept", b"new") == 0  # exists: never rewritten
    assert out.add(tmp_path / "a" / "x", b"xx") == 2
    assert out.add(tmp_path / "b" / "y", b"yyy") == 3
    assert not (tmp_path / "a" / "x").exists()  # not before the batch's syncs
    out.close()
    assert (tmp_path / "a" / "kept").read_bytes() == b"old"
    assert (tmp_path / "a" / "x").read_bytes() == b"xx"
    assert (tmp_path / "b" / "y").read_bytes() == b"yyy"
    assert not [p for p in tmp_path.rglob(f"{TEMP_PREFIX}*")]


def test_a_batch_is_flushed_at_its_limit(tmp_path):
    out = OnceWriter(limit=10)
    out.add(tmp_path / "one", b"12345")
    assert not (tmp_path / "one").exists()
    out.add(tmp_path / "two", b"67890")  # 10 bytes: the batch goes
    assert (tmp_path / "one").read_bytes() == b"12345"
    assert (tmp_path / "two").read_bytes() == b"67890"


def test_a_failed_batch_leaves_no_temp_file(tmp_path, monkeypatch):
    import os

    out = OnceWriter()
    out.add(tmp_path / "f", b"data")

    def fail(_fd):
        raise OSError("disk gone")

    monkeypatch.setattr(os, "fdatasync", fail)
    with pytest.raises(OSError, match="disk gone"):
        out.close()
    assert list(tmp_path.iterdir()) == []


def test_every_file_is_synced_before_any_is_renamed_into_place(tmp_path, monkeypatch):
    import os

    out = OnceWriter()
    dests = [tmp_path / f"d{i}" / "leaf" for i in range(6)]
    for i, dest in enumerate(dests):
        out.add(dest, b"z" * (i + 1))
    real = os.fdatasync
    synced: list[int] = []

    def sync(fd):
        assert not any(d.exists() for d in dests)  # no name visible before its bytes are durable
        real(fd)
        synced.append(fd)

    monkeypatch.setattr(os, "fdatasync", sync)
    out.close()
    assert len(synced) == len(dests)
    assert [d.read_bytes() for d in dests] == [b"z" * (i + 1) for i in range(6)]
