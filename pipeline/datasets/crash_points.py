"""Test hook for the crash-safety tests: pause a build at a named point so a test can kill it.

``LAKETRAIN_TEST_PAUSE_AT=<point>`` makes the build print ``LAKETRAIN_PAUSED_AT <point>`` on
stderr and sleep there; the test waits for the marker and sends SIGKILL. Unset, it is a no-op.
Points: ``process_decoded`` (after decoding a shard, before writing its segment),
``segment_before_rename``, ``segment_renamed`` (published, not yet recorded),
``segment_reused`` (an existing segment found for the shard, not yet recorded again), ``before_commit`` (every segment written and recorded),
``commit_staged`` (version folder staged, not yet renamed), ``commit_renamed`` (folder
published, store not yet committed), ``head_committed`` (version and head move committed in
the store, the HEAD file not yet written). ``LAKETRAIN_TEST_PAUSE_NTH=<n>`` pauses at the n-th
time the point is reached in the process (default the first). ``LAKETRAIN_TEST_PAUSE_SECONDS``
bounds the pause (default 60); ``LAKETRAIN_TEST_RESUME_FILE=<path>`` ends it as soon as that
file exists, so a test can act during the pause and then let the build go on.
"""

from __future__ import annotations

import os
import sys
import time

_seen: dict[str, int] = {}


def pause_hook(point: str) -> None:
    if os.environ.get("LAKETRAIN_TEST_PAUSE_AT") != point:
        return
    _seen[point] = _seen.get(point, 0) + 1
    if _seen[point] == int(os.environ.get("LAKETRAIN_TEST_PAUSE_NTH", "1")):
        sys.stderr.write(f"LAKETRAIN_PAUSED_AT {point}\n")
        sys.stderr.flush()
        deadline = time.monotonic() + float(os.environ.get("LAKETRAIN_TEST_PAUSE_SECONDS", "60"))
        resume = os.environ.get("LAKETRAIN_TEST_RESUME_FILE")
        while (left := deadline - time.monotonic()) > 0:
            if resume and os.path.exists(resume):
                return
            time.sleep(min(left, 0.05) if resume else left)
