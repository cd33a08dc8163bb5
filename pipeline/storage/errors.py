"""The storage layer's one error type."""


class StorageError(RuntimeError):
    """An object-store operation failed; the message names the URL (never credentials)."""
