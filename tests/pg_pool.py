"""Test databases on the local PostgreSQL: migrated ones recycled, the rest dropped behind.

``DROP DATABASE`` forces a checkpoint of the whole server and ``CREATE DATABASE ... TEMPLATE``
writes a whole catalog to the WAL: measured on the shared 2-core machine, 0.3-1 s per create
and 0.2-2 s per drop, i.e. ~1.6 s of setup and teardown for each of ~260 PostgreSQL store
tests, spent waiting on the disk. So, per test process:

- a database copied from a *migrated* template is, once its test is done, checked to still
  have exactly the template's schema (tables, columns, constraints, indexes, sequences, types,
  functions, schemas, database settings, the Alembic version) and then emptied with one
  ``TRUNCATE ... RESTART IDENTITY`` (and its sequences restarted), which gives the same state
  as a fresh copy (a freshly migrated store holds no rows but its Alembic version) at the cost
  of one commit. Any difference, or a test's connection that will not go away, and it is
  dropped instead.
- every other database (an empty one for the migration tests, a changed one) is dropped on a
  background thread, so the checkpoint overlaps the next test instead of adding to it.

Each test still gets a database no other *live* test uses; names stay uuid-based
(``lt_test_<hex>``), so xdist workers and other people's runs never meet.
"""

from __future__ import annotations

import atexit
import queue
import threading
import uuid
from collections import defaultdict
from collections.abc import Callable
from typing import Any

# Everything a test could have changed in a database's schema, as sorted text. Database-level
# settings (ALTER DATABASE ... SET) live in the shared catalog, so the name is a parameter.
_SCHEMA_FINGERPRINT = """
SELECT string_agg(item, E'\\n' ORDER BY item) FROM (
  SELECT 'ns ' || nspname AS item FROM pg_namespace
   WHERE nspname NOT LIKE 'pg\\_%%' AND nspname <> 'information_schema'
  UNION ALL
  SELECT 'rel ' || n.nspname || '.' || c.relname || ' ' || c.relkind::text
         || coalesce(' ' || a.attnum::text || ' ' || a.attname || ' '
                     || format_type(a.atttypid, a.atttypmod) || ' ' || a.attnotnull::text
                     || coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), ''), '')
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
    LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
   WHERE n.nspname NOT LIKE 'pg\\_%%' AND n.nspname <> 'information_schema'
  UNION ALL
  SELECT 'idx ' || indexrelid::regclass::text || ' ' || pg_get_indexdef(indexrelid)
    FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
    JOIN pg_namespace n ON n.oid = c.relnamespace
   WHERE n.nspname NOT LIKE 'pg\\_%%' AND n.nspname <> 'information_schema'
  UNION ALL
  SELECT 'con ' || conrelid::regclass::text || ' ' || conname || ' ' || pg_get_constraintdef(oid)
    FROM pg_constraint WHERE connamespace NOT IN
      (SELECT oid FROM pg_namespace WHERE nspname LIKE 'pg\\_%%' OR nspname = 'information_schema')
  UNION ALL
  SELECT 'fn ' || p.oid::regprocedure::text FROM pg_proc p
    JOIN pg_namespace n ON n.oid = p.pronamespace
   WHERE n.nspname NOT LIKE 'pg\\_%%' AND n.nspname <> 'information_schema'
  UNION ALL
  SELECT 'type ' || t.typname || ' ' || t.typtype::text FROM pg_type t
    JOIN pg_namespace n ON n.oid = t.typnamespace
   WHERE n.nspname NOT LIKE 'pg\\_%%' AND n.nspname <> 'information_schema'
     AND t.typtype IN ('e', 'd', 'c') AND t.typrelid = 0
  UNION ALL
  SELECT 'trg ' || tgname FROM pg_trigger WHERE NOT tgisinternal
  UNION ALL
  SELECT 'set ' || array_to_string(s.setconfig, ',') FROM pg_db_role_setting s
    JOIN pg_database db ON db.oid = s.setdatabase WHERE db.datname = %(db)s
) AS everything
"""

_TABLES = """
SELECT quote_ident(schemaname) || '.' || quote_ident(tablename) FROM pg_tables
 WHERE schemaname NOT LIKE 'pg\\_%' AND schemaname <> 'information_schema'
   AND tablename <> 'alembic_version'
"""
_SCHEMAS = """
SELECT quote_ident(nspname) FROM pg_namespace
 WHERE nspname NOT LIKE 'pg\\_%' AND nspname <> 'information_schema'
"""
_SEQUENCES = """
SELECT quote_ident(schemaname) || '.' || quote_ident(sequencename) FROM pg_sequences
 WHERE schemaname NOT LIKE 'pg\\_%' AND schemaname <> 'information_schema'
"""


class PgDatabasePool:
    """Databases for tests: ``take(template)`` a fresh-state copy, ``give_back`` when done.

    ``admin`` runs one autocommit statement on the admin database; ``connect(name)`` opens an
    autocommit connection to database ``name`` (both injected: the pool knows no URL)."""

    def __init__(self, admin: Callable[[str], None], connect: Callable[[str], Any]) -> None:
        self._admin = admin
        self._connect = connect
        self._recycled: dict[str, list[str]] = defaultdict(list)  # template ('' empty) -> ready
        self._fingerprints: dict[str, tuple[str, list]] = {}  # template -> a fresh copy's state
        self._made_from: dict[str, str] = {}  # database in use -> its template key
        self._lock = threading.Lock()
        self._drops: queue.Queue[str | None] = queue.Queue()
        self._errors: list[BaseException] = []
        self._thread: threading.Thread | None = None

    def take(self, template: str | None) -> str:
        """A database in the state of a fresh copy of ``template`` (``None``: empty)."""
        self._raise_background_error()
        key = template or ""
        with self._lock:
            ready = self._recycled.get(key)
            name = ready.pop() if ready else None
        if name is None:
            name = f"lt_test_{uuid.uuid4().hex[:12]}"
            suffix = f' TEMPLATE "{template}"' if template else ""
            self._admin(f'CREATE DATABASE "{name}"{suffix}')
            if key not in self._fingerprints:  # the first copy, untouched: what fresh means
                with self._connect(name) as conn:
                    self._fingerprints[key] = self._state(conn, name)
        self._made_from[name] = key
        return name

    def give_back(self, name: str) -> None:
        """``name``'s test is over: empty it for the next test, or drop it in the background."""
        key = self._made_from.pop(name, None)
        if key is not None and self._reset(name, key):
            with self._lock:
                self._recycled[key].append(name)
        else:
            self._drop_later(name)

    def forget_template(self, template: str) -> None:
        """Before ``template`` is dropped: its recycled copies go, and every queued drop."""
        with self._lock:
            names = self._recycled.pop(template, [])
        for name in names:
            self._drop_later(name)
        self.drain()

    def drain(self) -> None:
        if self._thread is not None:
            self._drops.join()
        self._raise_background_error()

    def close(self) -> None:
        """End of the test process: drop whatever is left, then stop the thread."""
        with self._lock:  # the recycled ones, and any a test took and never gave back
            left = [n for names in self._recycled.values() for n in names] + list(self._made_from)
            self._recycled.clear()
            self._made_from.clear()
        for name in left:
            self._drop_later(name)
        if self._thread is not None:
            self._drops.put(None)
            self._thread.join(timeout=300)
            self._thread = None

    # ---------------------------------------------------------------- recycling

    def _state(self, conn: Any, name: str) -> tuple[str, list]:
        """What must equal a fresh copy's: the schema, and the Alembic version rows."""
        schema = conn.execute(_SCHEMA_FINGERPRINT, {"db": name}).fetchone()[0] or ""
        return schema, _alembic_rows(conn)

    def _reset(self, name: str, key: str) -> bool:
        """Bring ``name`` back to a fresh copy's state; False: drop it instead. A copy of a
        migrated template is emptied when its schema is still the template's; an empty
        database (``key`` "", for the tests of the migrations) loses every schema it gained."""
        expected = self._fingerprints[key]
        self._admin(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            f"WHERE datname = '{name}' AND pid <> pg_backend_pid()"
        )
        try:
            with self._connect(name) as conn:
                conn.execute("SET lock_timeout = '5s'")
                if not key:
                    return self._reset_empty(conn, name, expected)
                if self._state(conn, name) != expected:
                    return False
                tables = [r[0] for r in conn.execute(_TABLES).fetchall()]
                with conn.transaction():
                    if tables:
                        conn.execute(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY CASCADE")
                    for (seq,) in conn.execute(_SEQUENCES).fetchall():
                        conn.execute(f"ALTER SEQUENCE {seq} RESTART")
                return True
        except Exception:  # a connection that would not go, a lock: a fresh copy is safer
            return False

    def _reset_empty(self, conn: Any, name: str, expected: tuple[str, list]) -> bool:
        schemas = [r[0] for r in conn.execute(_SCHEMAS).fetchall()]
        with conn.transaction():
            for schema in schemas:
                conn.execute(f"DROP SCHEMA {schema} CASCADE")
            conn.execute("CREATE SCHEMA public AUTHORIZATION pg_database_owner")
            conn.execute("GRANT USAGE ON SCHEMA public TO PUBLIC")
        return self._state(conn, name) == expected

    # ---------------------------------------------------------------- dropping behind

    def _drop_later(self, name: str) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="pg-drops", daemon=True)
            self._thread.start()
            atexit.register(self.close)
        self._drops.put(name)

    def _run(self) -> None:
        while (name := self._drops.get()) is not None:
            try:
                self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            except BaseException as exc:  # surfaced in the next take, never lost
                self._errors.append(exc)
            finally:
                self._drops.task_done()
        self._drops.task_done()

    def _raise_background_error(self) -> None:
        if self._errors:
            exc = self._errors.pop(0)
            raise RuntimeError(f"dropping a test database failed: {exc}") from exc


def _alembic_rows(conn: Any) -> list:
    try:
        return sorted(conn.execute("SELECT * FROM alembic_version").fetchall())
    except Exception:
        return []
