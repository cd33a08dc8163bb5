"""A large lake's walk split over processes: each walks its own range of subfolders.

At a million files a no-change rescan is a stat of every file and a compare with its ledger
row, in Python, ~4 us a file on one core: twice a bare ``os.scandir`` + stat walk. Split by
folder over two processes, the walk takes about half that (bench/scale.py, bench/scan.py).

How the work is cut. The dataset folders' own files are walked here first; their subfolders
are sorted by path and cut into contiguous ranges, one per share. Share 0 is walked in this
process, as entries are needed; each other share in a child forked after the ledger keys were
loaded, so it finds them in its copy of ``FastPath.known`` without a database connection. A
share owns every ledger path in its range of the path order, ``[its first subfolder + "/",
the next share's first subfolder + "/")``, walked or not: what it leaves unmatched there is
its part of what the walk did not see (deleted files, vanished folders, files under folders
it could not list). So every ledger row is matched or left by exactly one share, and the
merged FastPath equals a single walk's.

A child sends its entries and FastPath state back pickled through a pipe and leaves with
``os._exit`` (nothing of the parent's, such as a database connection, is closed or flushed
from the child). A child that dies without a result fails the walk (and so the scan's
transaction) with the reason; the children left are killed when the walk is closed early.
"""

from __future__ import annotations

import os
import pickle
import signal
from collections.abc import Iterator
from dataclasses import dataclass

from pipeline.lake.walk import Entry, FastPath, _walk_dir


class WalkShareError(RuntimeError):
    """A process walking a share of the lake ended without sending its result."""


@dataclass
class _Share:
    folders: list[tuple[str, str]]  # (folder, rel), sorted by rel + "/"
    low: str  # the share's range of ledger paths: [low, high); "" and None: unbounded
    high: str | None

    def owned(self, known: dict[str, tuple]) -> dict[str, tuple]:
        """The rows of ``known`` in this share's range (one comparison per row: at a million
        rows a method call per row would cost more than the comparisons)."""
        low, high = self.low, self.high
        if high is None:
            return {path: row for path, row in known.items() if path >= low}
        return {path: row for path, row in known.items() if low <= path < high}


@dataclass
class _Result:
    entries: list[Entry]
    unchanged: int
    stale: dict[str, tuple]
    matched_escapable: set[str]
    left: dict[str, tuple]  # ledger rows in the share's range the walk did not match


@dataclass
class _Child:
    pid: int
    fd: int
    share: _Share
    done: bool = False


def walk_split(
    root: str,
    tops: list[tuple[str, str]],
    now_ns: int,
    settle_ns: int,
    fast: FastPath,
    shares: int,
) -> Iterator[Entry]:
    """Walk the dataset folders ``tops`` (``(folder, rel)``) with their subfolders spread over
    ``shares`` processes; yield what ``walk_lake`` would, and leave ``fast`` as it would."""
    folders: list[tuple[str, str]] = []
    for folder, rel in tops:
        # Their own files here, before any fork: the matched rows leave every share's copy.
        yield from _walk_dir(root, folder, rel, now_ns, settle_ns, fast, defer=folders)
    folders.sort(key=lambda f: f[1] + "/")
    cut = _cut(folders, shares)
    if len(cut) < 2:
        for folder, rel in folders:
            yield from _walk_dir(root, folder, rel, now_ns, settle_ns, fast)
        return
    children: list[_Child] = []
    try:
        for share in cut[1:]:
            children.append(_fork(share, root, now_ns, settle_ns, fast))
        for folder, rel in cut[0].folders:
            yield from _walk_dir(root, folder, rel, now_ns, settle_ns, fast)
        # What this process's copy holds outside share 0 belongs to the children's copies.
        mine = cut[0].owned(fast.known)
        fast.known.clear()
        fast.known.update(mine)
        for child in children:
            result = _collect(child)
            yield from result.entries
            fast.unchanged += result.unchanged
            fast.stale.update(result.stale)
            fast.matched_escapable |= result.matched_escapable
            fast.known.update(result.left)
    finally:
        for child in children:
            if not child.done:
                _stop(child)


def _cut(folders: list[tuple[str, str]], shares: int) -> list[_Share]:
    """``folders`` in contiguous runs of near-equal length, one per share (fewer when there
    are fewer folders), with each run's range of ledger paths."""
    n = min(shares, len(folders))
    if n < 2:
        return []
    starts = [len(folders) * k // n for k in range(n)]
    lows = [""] + [folders[s][1] + "/" for s in starts[1:]]
    return [
        _Share(
            folders[start : starts[k + 1] if k + 1 < n else len(folders)],
            low=lows[k],
            high=lows[k + 1] if k + 1 < n else None,
        )
        for k, start in enumerate(starts)
    ]


def _fork(share: _Share, root: str, now_ns: int, settle_ns: int, fast: FastPath) -> _Child:
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: walk, send, leave without running any of the parent's cleanup
        code = 1
        try:
            os.close(read_fd)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            try:
                payload = ("ok", _walk_share(share, root, now_ns, settle_ns, fast.known))
            except BaseException as exc:  # noqa: BLE001 - sent to the parent, raised there
                payload = ("error", exc)
            try:
                data = pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception as exc:  # noqa: BLE001 - an error that does not pickle
                data = pickle.dumps(("error", WalkShareError(f"{type(exc).__name__}: {exc}")))
            with os.fdopen(write_fd, "wb") as out:
                out.write(data)
            code = 0
        finally:
            os._exit(code)
    os.close(write_fd)
    return _Child(pid, read_fd, share)


def _walk_share(
    share: _Share, root: str, now_ns: int, settle_ns: int, known: dict[str, tuple]
) -> _Result:
    """In the child: walk the share's folders against this process's copy of the keys."""
    fast = FastPath(known)
    entries: list[Entry] = []
    for folder, rel in share.folders:
        entries.extend(_walk_dir(root, folder, rel, now_ns, settle_ns, fast))
    left = share.owned(known)
    return _Result(entries, fast.unchanged, fast.stale, fast.matched_escapable, left)


def _collect(child: _Child) -> _Result:
    fd, child.fd = child.fd, -1
    with os.fdopen(fd, "rb") as pipe:
        data = pipe.read()
    _, status = os.waitpid(child.pid, 0)
    child.done = True
    try:
        kind, value = pickle.loads(data) if data else (None, None)
    except Exception:  # noqa: BLE001 - a result cut short: the child died while sending it
        kind = None
    if kind is None:
        how = (
            f"killed by signal {os.WTERMSIG(status)}"
            if os.WIFSIGNALED(status)
            else f"exit status {os.waitstatus_to_exitcode(status)}"
        )
        first = child.share.folders[0][1]
        raise WalkShareError(
            f"the process walking {len(child.share.folders)} folder(s) from {first!r} on "
            f"ended without a result ({how}); nothing of this scan was recorded"
        )
    if kind == "error":
        raise value
    return value


def _stop(child: _Child) -> None:
    try:
        os.kill(child.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    os.waitpid(child.pid, 0)
    if child.fd >= 0:
        os.close(child.fd)
