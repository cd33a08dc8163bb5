"""The SQL metadata store: typed ORM models, Alembic migrations and the session factory.

The names below are loaded on first use (PEP 562): importing a light module of this package
(``pipeline.metadata.fastpath``) must not import SQLAlchemy."""

from typing import Any

__all__ = ["MetadataStore", "StoreBusyError", "open_store"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from pipeline.metadata import store

        return getattr(store, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
