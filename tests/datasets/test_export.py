"""Exports are readable by plain numpy / zarr in a process that never imports laketrain."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tests.datasets.conftest import image_lake

READER_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    dest, fmt, out = sys.argv[1], sys.argv[2], sys.argv[3]
    if fmt == "npy":
        x = np.load(dest + "/x.npy", allow_pickle=False)
        y = np.load(dest + "/y.npy", allow_pickle=False)
    else:
        import zarr
        g = zarr.open_group(dest + "/data.zarr", mode="r")
        x, y = g["x"][:], g["y"][:]
    meta = [json.loads(line) for line in open(dest + "/metadata.jsonl")]
    info = json.load(open(dest + "/export.json"))
    assert [m["index"] for m in meta] == list(range(len(x)))
    leaked = sorted(m for m in sys.modules if m == "pipeline" or m.startswith(("pipeline.", "laketrain")))
    np.savez(out, x=x, y=y, paths=np.array([m["path"] for m in meta]),
             classes=np.array(info["classes"]), leaked=np.array(leaked, dtype=str))
    """
)


@pytest.mark.parametrize("fmt", ["npy", "zarr"])
def test_export_is_readable_without_laketrain(sqlite_store, home, tmp_path, fmt):
    from pipeline.datasets.build import run_build
    from pipeline.datasets.export import export_version, open_ref

    image_lake(home, per_class=5)
    v = run_build("pets", workers=1, store=sqlite_store, max_files=4).version
    reader = open_ref(v.version_id[:8])
    dest = tmp_path / f"export-{fmt}"
    summary = export_version(reader, dest, fmt=fmt)
    assert summary["samples"] == len(reader) and not list(tmp_path.glob(".export-*"))

    script = tmp_path / "read_export.py"
    script.write_text(READER_SCRIPT)
    out = tmp_path / "seen.npz"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    # -I: isolated mode, so neither the cwd nor PYTHONPATH can put laketrain on the path.
    subprocess.run(
        [sys.executable, "-I", str(script), str(dest), fmt, str(out)],
        check=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    seen = np.load(out)
    assert seen["leaked"].tolist() == []
    x, y = reader.get_batch(np.arange(len(reader)))
    np.testing.assert_array_equal(seen["x"], x)
    np.testing.assert_array_equal(seen["y"], y)
    assert seen["paths"].tolist() == [reader.metadata(i)["path"] for i in range(len(reader))]
    assert seen["classes"].tolist() == reader.classes


def test_export_refuses_an_existing_destination_and_unknown_format(sqlite_store, home, tmp_path):
    from pipeline.datasets.build import run_build
    from pipeline.datasets.export import export_version, open_ref

    image_lake(home, per_class=2)
    run_build("pets", workers=1, store=sqlite_store)
    reader = open_ref("latest", dataset="pets")
    (tmp_path / "taken").mkdir()
    with pytest.raises(FileExistsError, match="already exists"):
        export_version(reader, tmp_path / "taken")
    with pytest.raises(ValueError, match="--format must be one of npy, zarr"):
        export_version(reader, tmp_path / "new", fmt="hdf5")
    assert not (tmp_path / "new").exists()


def test_export_of_a_split_keeps_only_that_split(sqlite_store, home, tmp_path):
    from pipeline.datasets.build import run_build
    from pipeline.datasets.export import export_version, open_ref

    image_lake(home, per_class=6)
    run_build("pets", workers=1, store=sqlite_store)
    val = open_ref("latest", dataset="pets").split("val")
    export_version(val, tmp_path / "val")
    meta = [
        json.loads(line) for line in (tmp_path / "val" / "metadata.jsonl").read_text().splitlines()
    ]
    assert len(meta) == len(val) == len(np.load(tmp_path / "val" / "x.npy"))
    assert {m["split"] for m in meta} == {"val"}
