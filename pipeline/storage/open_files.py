"""The open-file limit of a process that pins many cached objects (pipeline/storage/cache.py)."""

from __future__ import annotations

import resource

# Descriptors kept free below the open-file limit for what is not a pin: S3 sockets, temp files
# of downloads in flight, the reader's own files.
FD_HEADROOM = 128


def raise_open_file_limit() -> bool:
    """Double this process's soft open-file limit, up to the hard one; False when it is there.

    A reader pins each cached object with an open lock file (a shared flock), so a version of a
    million samples (~8,000 leaf chunks) needs more descriptors than the soft limit many systems
    start a process with (1,024), while the hard limit is usually far higher."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft >= hard:
        return False
    wanted = max(soft * 2, 1024)
    resource.setrlimit(
        resource.RLIMIT_NOFILE,
        (wanted if hard == resource.RLIM_INFINITY else min(hard, wanted), hard),
    )
    return True
