"""One full build of the `bench` dataset in a process of its own, with the ``pipeline`` package
of ``--tree`` (this checkout or an older one): ``bench/build.py --against`` runs it for both
trees in turns on the same lake. Self-contained on purpose: it imports nothing from bench/,
so an older tree's bench helpers never mix with this one's. Prints one JSON line: the build's
wall time and its phases."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tree", required=True, help="the checkout whose pipeline package builds")
    ap.add_argument("--work", required=True, help="holds lake/ and recipes/ (bench/build.py's)")
    ap.add_argument("--data", required=True, help="a fresh DATA_ROOT for this build")
    ap.add_argument("--workers", type=int, required=True)
    args = ap.parse_args()
    tree = Path(args.tree).resolve()
    sys.path.insert(0, str(tree))
    work, data = Path(args.work), Path(args.data)
    os.environ.update(
        {
            "LAKETRAIN_HOME": str(work),
            "LAKE_DIR": str(work / "lake"),
            "DATA_ROOT": str(data),
            "METADATA_DB_URL": f"sqlite:///{data / 'metadata.db'}",
            "SETTLE_SECONDS": "0",
        }
    )
    import pipeline
    from pipeline.datasets.build import run_build

    # Else an installed laketrain (pip install -e) answers for a tree without one, unnoticed.
    if Path(pipeline.__file__).resolve().parents[1] != tree:
        raise SystemExit(f"{tree} has no pipeline package (found {pipeline.__file__})")

    # As bench/build.py's use_store: one-time costs of a fresh process and store (imports,
    # Pillow's plugins, migrations) are paid by a tiny build first, not by the measured one.
    run_build("warmup", workers=1)
    start = time.perf_counter()
    report = run_build("bench", workers=args.workers)
    wall = time.perf_counter() - start
    if report.version is None:
        raise SystemExit("the full build published no version")
    print(json.dumps({"wall": wall, "seconds": report.seconds, "samples": report.version.samples}))


if __name__ == "__main__":
    main()
