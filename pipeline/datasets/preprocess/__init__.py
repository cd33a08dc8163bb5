"""Preprocessors: one lake file → samples (see ``base.py`` for the contract)."""

from pipeline.datasets.preprocess.base import (
    Decoded,
    DecodeResult,
    InvalidInput,
    Preprocessor,
    sample_dtype,
    sample_shape,
)
from pipeline.datasets.preprocess.registry import preprocessor_for

__all__ = [
    "Decoded",
    "DecodeResult",
    "InvalidInput",
    "Preprocessor",
    "preprocessor_for",
    "sample_dtype",
    "sample_shape",
]
