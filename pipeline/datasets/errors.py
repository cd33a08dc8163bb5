"""Errors of the build steps (a module of its own so that helpers of build.py can raise them)."""

from __future__ import annotations


class BuildError(RuntimeError):
    """The build cannot go on (e.g. the recipe changed between plan and process, or processed
    samples it counted on were deleted); the message names the file(s) and what to do."""
