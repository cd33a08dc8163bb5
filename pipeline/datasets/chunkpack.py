"""A node pack: one chunk node and the indexes of all its leaves in one object.

On an ``s3://`` data root every request costs a round trip, and a version's leaves are many
(~8,000 at a million samples, one ``.idx`` each): a reader that fetched them one by one would
spend its cold open on requests. So the publisher (``publish.py``) also uploads, for each node,
``chunks/<h[:2]>/<h>.pack`` (``h``: the node's hash) holding the node's bytes and its leaves'
``.idx`` bytes, and marks the manifest's chunk section ``packed``; a cold open then costs one
GET per node, not one per leaf. The node and index files stay too (builds and exports on other
workers pull them one by one, as before), so a pack adds ~49 bytes per sample of each node a
version writes, and only on S3.

Layout: one JSON header line ``{"format": 1, "parts": [len, ...]}``, then the parts' bytes back
to back: the node first, then its children's indexes in the node's order. A pack is checked by
its parts (the node's bytes against its name, each index against the checksum its node lists:
``chunkread.node_indexes``), so it needs no checksum of its own.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

PACK_SUFFIX = ".pack"
_FORMAT = 1


def encode(parts: Sequence[bytes]) -> bytes:
    header = json.dumps({"format": _FORMAT, "parts": [len(p) for p in parts]}).encode()
    return b"".join([header, b"\n", *parts])


def decode(raw: bytes) -> list[bytes]:
    """The parts of a pack; ValueError when ``raw`` is not a whole pack."""
    cut = raw.find(b"\n")
    if cut < 0:
        raise ValueError("no header line")
    header = json.loads(raw[:cut])
    if not isinstance(header, dict) or header.get("format") != _FORMAT:
        raise ValueError(f"not a pack of format {_FORMAT}")
    sizes = [int(n) for n in header["parts"]]
    if any(n < 0 for n in sizes):
        raise ValueError("a negative part size")
    offset = cut + 1
    if offset + sum(sizes) != len(raw):
        raise ValueError(f"{len(raw) - offset} bytes after the header, its parts {sum(sizes)}")
    parts = []
    for size in sizes:
        parts.append(raw[offset : offset + size])
        offset += size
    return parts
