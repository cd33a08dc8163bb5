"""write_tree with the parent's leaves offered: byte-identical to chunking from scratch, on
random edits, and an unchanged run of samples takes the parent's leaves without the per-key
cut rule."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.datasets import chunks
from pipeline.datasets.chunkwrite import write_tree
from tests.datasets.chunk_synth import S, image, md5, ordered

FOLDERS = ["cat", "dog", "owl"]


def base(n: int) -> list[S]:
    out = [image(f"pets/{FOLDERS[i % 3]}/{i:05d}.png", FOLDERS[i % 3]) for i in range(n)]
    out += [S("pets/t.csv", md5(f"r{j}"), "cat", line=j) for j in range(150)]
    out += [S("pets/aug/a.png", md5("a"), "cat", copy=c, duplicate=c > 0) for c in range(3)]
    return ordered(out)


def edit(samples: list[S], seed: int, k: int) -> list[S]:
    """k random edits: inserts (in a folder, in a new folder), deletes, another md5, another
    label, another mtime (only the metadata line changes), a table row edited."""
    rng = random.Random(seed)
    out = list(samples)
    for _ in range(k):
        op = rng.randrange(6)
        i = rng.randrange(len(out)) if out else 0
        if op == 0:
            folder = rng.choice([*FOLDERS, "new"])
            out.append(image(f"pets/{folder}/x{rng.randrange(10**6):06d}.png", folder))
        elif op == 1 and out:
            out.pop(i)
        elif op == 2 and out:
            out[i] = replace(out[i], md5=md5(f"v{rng.random()}"))
        elif op == 3 and out:
            out[i] = replace(out[i], label=rng.choice(FOLDERS))
        elif op == 4 and out:
            out[i] = replace(out[i], mtime_ns=rng.randrange(10**9))
        elif op == 5 and out and out[i].line is not None:
            out[i] = replace(out[i], row=out[i].row + 1)
    uniq = {(s.path, s.line, s.copy): s for s in out}
    return ordered(list(uniq.values()))


def offered(tree: chunks.Tree, samples: list[S]) -> list[tuple[chunks.LeafRef, bytes]]:
    return [
        (leaf, chunks.sample_key(samples[start]))
        for leaf, (start, _stop) in zip(tree.leaves, tree.bounds, strict=True)
    ]


def files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.startswith(".tmp")
    }


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    n=st.integers(min_value=0, max_value=1500),
    seed=st.integers(min_value=0, max_value=10**6),
    k=st.integers(min_value=0, max_value=40),
)
def test_reusing_the_parents_leaves_gives_the_chunks_of_a_fresh_chunking(
    tmp_path_factory, n, seed, k
):
    old = base(n)
    new = edit(old, seed, k)
    shared = tmp_path_factory.mktemp("shared")
    parent_tree = write_tree(shared, old)
    got = write_tree(shared, new, parent=offered(parent_tree, old))
    fresh_root = tmp_path_factory.mktemp("fresh")
    want = write_tree(fresh_root, new)
    assert got.leaves == want.leaves and got.nodes == want.nodes
    assert got.bounds == want.bounds == chunks.leaf_bounds(new)
    # The chunk files of the new version are those a fresh chunking writes, byte for byte.
    mine = files(shared)
    assert all(mine[name] == data for name, data in files(fresh_root).items())


def test_an_unchanged_run_takes_the_parents_leaves_without_the_cut_rule(tmp_path, monkeypatch):
    old = base(3000)
    tree = write_tree(tmp_path, old)
    ruled: list[int] = []
    real = chunks.next_cut

    def spy(samples, start):
        stop = real(samples, start)
        ruled.append(stop - start)
        return stop

    monkeypatch.setattr(chunks, "next_cut", spy)
    again = write_tree(tmp_path, old, parent=offered(tree, old))
    assert again.leaves == tree.leaves and ruled == []
    # One new file in one folder: only the leaf it falls in runs the rule (plus, at most,
    # the one after it when the cut moved).
    grown = ordered([*old, image("pets/dog/01000x.png", "dog")])
    write_tree(tmp_path, grown, parent=offered(tree, old))
    assert 0 < sum(ruled) <= 2 * chunks.LEAF_MAX and len(ruled) <= 2
