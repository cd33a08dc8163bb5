"""Every error during a build names the file it concerns: a decode that fails for a reason
that is no verdict on the file (an I/O error), a full disk under a segment, a damaged
segment.json. None of them marks the file invalid for good, and the rerun recovers."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.datasets.conftest import image_lake


def test_an_io_error_while_decoding_names_the_file_and_marks_nothing_invalid(
    store, home, monkeypatch
):
    from pipeline.datasets.build import BuildError, run_build
    from pipeline.datasets.preprocess.image import ImagePreprocessor
    from pipeline.metadata.ledger import LedgerFile

    paths = image_lake(home, per_class=2)
    victim = paths[1]
    real = ImagePreprocessor.decode

    def flaky(self, abspath, recipe):
        if abspath.endswith(victim):
            raise OSError(errno.EIO, "Input/output error")  # a bad sector, say
        return real(self, abspath, recipe)

    monkeypatch.setattr(ImagePreprocessor, "decode", flaky)
    with pytest.raises(BuildError) as info:
        run_build("pets", workers=1, store=store)
    assert victim in str(info.value) and "Input/output error" in str(info.value)
    with store.session() as session:
        assert {f.status for f in session.query(LedgerFile)} == {"ok"}

    monkeypatch.setattr(ImagePreprocessor, "decode", real)
    assert run_build("pets", workers=1, store=store).version.samples == len(paths)


def test_a_full_disk_names_the_segment(store, home, monkeypatch):
    from pipeline.datasets import segments
    from pipeline.datasets.build import BuildError, run_build

    image_lake(home, per_class=2)

    def no_space(path, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(segments, "_save_npy", no_space)
    with pytest.raises(BuildError) as info:
        run_build("pets", workers=1, store=store)
    message = str(info.value)
    assert "No space left on device" in message and "/segments/" in message
    assert not list((home / "data" / "segments").glob("*/.tmp-*"))  # no half-written temp


def test_a_damaged_segment_json_is_named_by_the_cli(store, home):
    from pipeline.datasets.build import plan, process
    from pipeline.lake.scan import scan
    from pipeline.metadata.datasets import ProcessedSample, Segment

    image_lake(home, per_class=2)
    scan(home / "lake", dataset="pets", store=store)
    (shard,) = plan("pets", store=store)
    ref = process(shard, store=store)
    info = home / "data" / ref.path / "segment.json"
    # Recorded, then lost by the store (rebuilt from scratch): the build finds the folder again.
    with store.session() as session:
        session.query(ProcessedSample).delete()
        session.query(Segment).delete()
    info.write_text("{ damaged")
    result = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "build", "pets", "--workers", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, "COLUMNS": "400"},
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "segment.json" in result.stderr and ref.segment_id in result.stderr
