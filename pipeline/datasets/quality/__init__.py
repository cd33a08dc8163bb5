"""The quality report of a dataset version (docs/quality.md).

``report``: the typed report every version carries (manifest ``quality`` key, store column
``dataset_versions.quality``) and the flat ``metrics()`` the gate's rules test.
``phash``: the 64-bit perceptual hash of a stored, processed sample. ``nearindex``: the
multi-index hash over a dataset's hashes, persisted under DATA_ROOT/quality/, so a version
compares only its new samples. ``compute``: builds the report at commit.
"""

from pipeline.datasets.quality.report import QualityReport

__all__ = ["QualityReport"]
