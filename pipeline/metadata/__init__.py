"""The SQL metadata store: typed ORM models, Alembic migrations and the session factory."""

from pipeline.metadata.store import MetadataStore, StoreBusyError, open_store

__all__ = ["MetadataStore", "StoreBusyError", "open_store"]
