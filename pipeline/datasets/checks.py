"""Checks run on a version before training."""

from __future__ import annotations

from typing import Any

import numpy as np


def check_leakage(reader: Any) -> list[str]:
    """The md5s found in both the train and the val split (sorted); empty means no leakage.
    Splits are decided by content, so a non-empty answer means a corrupt or hand-made version."""
    base = reader
    train = set(np.asarray(base.split("train").md5s()).tolist())
    val = set(np.asarray(base.split("val").md5s()).tolist())
    return sorted(train & val)
