"""A large lake's walk split over processes: each walks its own range of subfolders.

At a million files a no-change rescan is a stat of every file and a compare with its ledger
row, in Python, ~4 us a file on one core: twice a bare ``os.scandir`` + stat walk. Split by
folder over two processes, the walk takes about half that (bench/scale.py, bench/scan.py).

How the work is cut. The dataset folders' subfolders are listed, sorted by path and cut into
contiguous ranges, one per share. Share 0 is walked in this process, as entries are needed,
with the dataset folders' own files; each other share in a child forked for it. A share owns
ledger paths by ``PathRange``: share k > 0 every path in its range of the path order, ``[its
first subfolder + "/", the next share's first subfolder + "/")``, that lies in a subfolder;
share 0 every other path. It owns them walked or not: what it leaves unmatched there is its
part of what the walk did not see (deleted files, vanished folders, files under folders it
could not list). So every ledger row is matched or left by exactly one share, and the merged
FastPath equals a single walk's.

The keys. Given a key source (pipeline.lake.ledger_keys), each process reads the keys of the
paths it owns, at the same time, the children on connections of their own. Given a FastPath
already filled, each child matches against its forked copy and keeps the rows it owns.
A subfolder made between the listing and the walk of its dataset folder is walked by the next
scan.

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
from typing import Protocol

from pipeline.lake.walk import Entry, FastPath, _walk_dir, is_ignored_name


class WalkShareError(RuntimeError):
    """A process walking a share of the lake ended without sending its result."""


@dataclass(frozen=True)
class PathRange:
    """The ledger paths a share owns: share 0 (``first``) every path before ``high`` and every
    path outside the subfolders; share k > 0 the paths of ``[low, high)`` inside them (``high``
    None: no upper bound). LedgerTx.load_keys says the same in SQL."""

    low: str
    high: str | None
    first: bool

    def select(self, known: dict[str, tuple]) -> dict[str, tuple]:
        """The rows of ``known`` this range owns (comprehensions without a call per row: at a
        million rows a method call per row would cost more than the comparisons)."""
        low, high = self.low, self.high
        if self.first:
            if high is None:
                return dict(known)
            return {p: row for p, row in known.items() if p < high or p.count("/") < 2}
        if high is None:
            return {p: row for p, row in known.items() if p >= low and p.count("/") >= 2}
        return {p: row for p, row in known.items() if low <= p < high and p.count("/") >= 2}


class KeySource(Protocol):
    """The ledger keys, read whole or by range (pipeline.lake.ledger_keys.LedgerKeys)."""

    reopenable: bool  # whether a share process can read its own (load_apart)

    def count(self) -> int: ...

    def load(self, where: PathRange | None = None) -> dict[str, tuple]: ...

    def load_apart(self, where: PathRange) -> dict[str, tuple]: ...


@dataclass
class _Share:
    folders: list[tuple[str, str]]  # (folder, rel), sorted by rel + "/"
    range: PathRange


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
    keys: KeySource | None = None,
) -> Iterator[Entry]:
    """Walk the dataset folders ``tops`` (``(folder, rel)``) with their subfolders spread over
    ``shares`` processes; yield what ``walk_lake`` would, and leave ``fast`` as it would. With
    ``keys``, ``fast`` is filled from them here, each process reading what it owns."""
    cut = _cut(_subfolders(tops), shares)
    if len(cut) < 2:
        if keys is not None:
            fast.known = keys.load()
        for folder, rel in tops:
            yield from _walk_dir(root, folder, rel, now_ns, settle_ns, fast)
        return
    children: list[_Child] = []
    try:
        for share in cut[1:]:
            children.append(_fork(share, root, now_ns, settle_ns, fast, keys))
        mine = cut[0]
        if keys is not None:
            fast.known = keys.load(mine.range)
        for folder, rel in tops:
            # Their own files; their subfolders were listed above (`again` is dropped).
            again: list[tuple[str, str]] = []
            yield from _walk_dir(root, folder, rel, now_ns, settle_ns, fast, defer=again)
        for folder, rel in mine.folders:
            yield from _walk_dir(root, folder, rel, now_ns, settle_ns, fast)
        if keys is None:
            # A copy of every row: what it holds outside share 0 is the children's.
            fast.known = mine.range.select(fast.known)
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


def _subfolders(tops: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The dataset folders' subfolders as ``(folder, rel)``, sorted by ``rel + "/"`` (the
    names _walk_dir would descend into; a dataset folder that cannot be listed has none here,
    and its walk says why)."""
    out: list[tuple[str, str]] = []
    for folder, rel in tops:
        try:
            with os.scandir(folder) as it:
                for entry in it:
                    try:
                        is_dir = entry.is_dir(follow_symlinks=False)
                    except OSError:
                        continue  # the walk of the dataset folder refuses it
                    if is_dir and not is_ignored_name(entry.name, is_dir=True):
                        out.append((entry.path, f"{rel}/{entry.name}"))
        except OSError:
            continue
    out.sort(key=lambda f: f[1] + "/")
    return out


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
            PathRange(lows[k], lows[k + 1] if k + 1 < n else None, first=k == 0),
        )
        for k, start in enumerate(starts)
    ]


def _fork(
    share: _Share, root: str, now_ns: int, settle_ns: int, fast: FastPath, keys: KeySource | None
) -> _Child:
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: walk, send, leave without running any of the parent's cleanup
        code = 1
        try:
            os.close(read_fd)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            try:
                known = fast.known if keys is None else keys.load_apart(share.range)
                payload = ("ok", _walk_share(share, root, now_ns, settle_ns, known, keys is None))
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
    share: _Share, root: str, now_ns: int, settle_ns: int, known: dict[str, tuple], copy: bool
) -> _Result:
    """In the child: walk the share's folders against this process's keys: its own, or
    (``copy``) its copy of every row, of which it sends back only those it owns."""
    fast = FastPath(known)
    entries: list[Entry] = []
    for folder, rel in share.folders:
        entries.extend(_walk_dir(root, folder, rel, now_ns, settle_ns, fast))
    left = share.range.select(fast.known) if copy else fast.known
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
