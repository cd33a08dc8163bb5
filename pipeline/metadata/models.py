"""Import every model module so ``Base.metadata`` knows all tables (Alembic, tests)."""

from pipeline.metadata import datasets, ledger, runs  # noqa: F401
from pipeline.metadata.base import Base

__all__ = ["Base"]
