"""Dataset models: recipes, processed samples, segments, versions and their samples.

Owned by the versioned-datasets work; created by migration 0002.
"""
