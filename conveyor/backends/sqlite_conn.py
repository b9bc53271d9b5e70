"""The SQLite store's connections, transactions, busy back-off and running totals."""

from __future__ import annotations

import ctypes
import os
import random
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ..clock import Clock
from ..exceptions import ConveyorError, QueueDoesNotExist, StoreUnavailable
from ..models import QueueAttributes
from ..notify import HUB
from .sqlite_schema import SCHEMA_VERSION, migrate
from .totals import RunningTotals

_COUNTS_SQL = (
    "UPDATE queues SET sent = sent + ?, received = received + ?, deleted = deleted + ? WHERE id = ?"
)


_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_heap_kept = False


def keep_heap() -> None:
    """Stop glibc from giving the top of the heap back to the kernel after every statement.

    SQLite allocates and frees a scratch page cache (about 90 KiB) for each statement that
    builds a temporary b-tree (RETURNING, IN lists). With glibc's default 128 KiB trim
    threshold, freeing it often shrinks the heap, and the next statement faults the pages
    back in, zero-filled: measured at 70-120 µs on a 30 µs claim. Keeping up to 64 MiB of
    freed heap (and serving blocks below 32 MiB from it) removes that; done once per process,
    on Linux with glibc only.
    """
    global _heap_kept
    if _heap_kept or not sys.platform.startswith("linux"):
        return
    _heap_kept = True
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_MMAP_THRESHOLD, 32 << 20)
    mallopt(_M_TRIM_THRESHOLD, 64 << 20)


def _write_counts(path: str, totals: RunningTotals) -> None:
    """Write counts a store still holds when it is garbage collected or the process exits."""
    rows = totals.take()
    if not rows:
        return
    try:
        conn = sqlite3.connect(path, isolation_level=None, timeout=10)
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(_COUNTS_SQL, rows)
            conn.execute("COMMIT")
        finally:
            conn.close()
    except sqlite3.Error:
        pass


# how long a process goes on using a queue row it read (its id and attributes), in seconds
ROW_CACHE = 1.0

T = TypeVar("T")


class _Dropped(ConveyorError):
    """The queue a remembered id named is gone (read the queue row again)."""


class _Tx:
    """`SQLiteConnections._tx`: BEGIN IMMEDIATE; COMMIT, or ROLLBACK on any error (SQLite's
    own errors raised as StoreUnavailable). A class rather than a generator-based context
    manager: every send, receive and delete opens one."""

    __slots__ = ("conn", "relaxed", "store")

    def __init__(self, store: SQLiteConnections, relaxed: bool) -> None:
        self.store = store
        self.relaxed = relaxed

    def __enter__(self) -> sqlite3.Connection:
        conn = self.conn = self.store._conn()
        if self.relaxed:
            conn.execute("PRAGMA synchronous = NORMAL")  # not allowed inside a transaction
        try:
            self.store._begin(conn)
        except BaseException:
            self._restore()
            raise
        return conn

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        conn = self.conn
        try:
            if kind is None:
                try:
                    if self.store._totals.due():
                        self.store._flush_counters(conn)
                    conn.execute("COMMIT")
                    return
                except BaseException as error:
                    exc = error
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise StoreUnavailable(f"SQLite store {self.store.path} failed: {exc}") from exc
            if kind is None and exc is not None:
                raise exc
        finally:
            self._restore()

    def _restore(self) -> None:
        if self.relaxed:
            self.conn.execute("PRAGMA synchronous = FULL")


class SQLiteConnections:
    """One connection per thread, `BEGIN IMMEDIATE` transactions, queue rows read at most
    ROW_CACHE seconds ago, and deferred totals."""

    clock: Clock
    path: str
    durability: str
    _busy_ms: int
    _local: threading.local
    _lock: threading.Lock
    _connections: list[sqlite3.Connection]
    _migrated: bool
    _totals: RunningTotals
    _attrs: dict[str, QueueAttributes]
    _rows: dict[str, tuple[int, QueueAttributes, float]]

    if TYPE_CHECKING:

        @property
        def key(self) -> str: ...

    # -- connections and transactions -----------------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None:
            return conn
        keep_heap()
        try:
            parent = os.path.dirname(self.path)
            if parent and not os.path.isdir(parent):
                raise StoreUnavailable(
                    f"cannot open SQLite store {self.path}: directory {parent} does not exist"
                )
            conn = sqlite3.connect(
                self.path,
                isolation_level=None,
                check_same_thread=False,
                timeout=self._busy_ms / 1000,
                cached_statements=512,
            )
            conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
            conn.execute("PRAGMA journal_mode = WAL")
            sync = "FULL" if self.durability == "full" else "NORMAL"
            conn.execute(f"PRAGMA synchronous = {sync}")
            conn.execute("PRAGMA cache_size = -32000")
            if not self._migrated:
                with self._lock:
                    if not self._migrated:
                        migrate(conn)
                        self._migrated = True
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"cannot open SQLite store {self.path}: {exc}") from exc
        self._local.conn = conn
        with self._lock:
            self._connections.append(conn)
        return conn

    def migrate(self) -> tuple[int, int] | None:
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, timeout=self._busy_ms / 1000)
            try:
                conn.execute("PRAGMA journal_mode = WAL")
                old = migrate(conn)
            finally:
                conn.close()
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"cannot migrate SQLite store {self.path}: {exc}") from exc
        self._migrated = True
        return old, SCHEMA_VERSION

    def _begin(self, conn: sqlite3.Connection) -> None:
        """BEGIN IMMEDIATE, retrying a busy lock with short randomised sleeps.

        SQLite's own busy handler sleeps 1, 2, 5, 10 ... 100 ms; under contention between
        processes that wastes most of the lock's free time, so the first attempts here
        do not wait inside SQLite at all and back off from 50 µs to 2 ms.
        """
        try:
            conn.execute("BEGIN IMMEDIATE")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise StoreUnavailable(f"SQLite store {self.path} is unavailable: {exc}") from exc
        deadline = time.monotonic() + self._busy_ms / 1000
        delay = 0.00005
        conn.execute("PRAGMA busy_timeout = 0")
        try:
            while True:
                time.sleep(delay * (0.5 + random.random()))
                try:
                    conn.execute("BEGIN IMMEDIATE")
                    return
                except sqlite3.OperationalError as exc:
                    if time.monotonic() > deadline:
                        raise StoreUnavailable(
                            f"SQLite store {self.path} stayed locked for"
                            f" {self._busy_ms / 1000:g} s: {exc}"
                        ) from exc
                delay = min(delay * 2, 0.002)
        finally:
            conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")

    def _tx(self, durable: bool = True) -> _Tx:
        """A write transaction (`with self._tx() as conn:`). At durability=full its commit
        waits for the disk, unless `durable` is False: then it is made durable by the next
        durable commit (or checkpoint), and a power cut before that can undo it."""
        return _Tx(self, not durable and self.durability == "full")

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        try:
            return self._conn().execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"SQLite store {self.path} failed: {exc}") from exc

    # -- queue rows -----------------------------------------------------------------------

    def _attributes(self, text: str) -> QueueAttributes:
        attrs = self._attrs.get(text)
        if attrs is None:
            attrs = self._attrs[text] = QueueAttributes.from_json(text)
        return attrs

    def _queue(self, conn: sqlite3.Connection, name: str) -> tuple[int, QueueAttributes]:
        row = conn.execute("SELECT id, attrs FROM queues WHERE name = ?", (name,)).fetchone()
        if row is None:
            self._rows.pop(name, None)
            raise QueueDoesNotExist(f"queue {name!r} does not exist: create it first")
        attrs = self._attributes(row[1])
        self._rows[name] = (row[0], attrs, self.clock.now())
        return row[0], attrs

    def _recent_queue(
        self, conn: sqlite3.Connection, name: str, now: float
    ) -> tuple[int, QueueAttributes]:
        """The queue's id and attributes as read at most ROW_CACHE seconds ago (by the
        store's clock).

        Sends, receives and deletes use this instead of reading the queue row every time.
        Queue ids are never used again, so a remembered id names this queue or a dropped
        table, which `_fresh_on_drop` turns into one retry with the row read again; an
        attribute change made by another process takes effect here within ROW_CACHE
        seconds (SQS itself takes up to a minute).
        """
        hit = self._rows.get(name)
        if hit is not None and 0.0 <= now - hit[2] < ROW_CACHE:
            return hit[0], hit[1]
        return self._queue(conn, name)

    def _fresh_on_drop(self, name: str, operation: Callable[[], T]) -> T:
        """Run a hot operation; if the queue's remembered table was dropped meanwhile (the
        queue deleted, perhaps made again), forget it and run once more."""
        try:
            return operation()
        except (StoreUnavailable, _Dropped) as exc:
            cause = exc.__cause__
            dropped = isinstance(exc, _Dropped) or (
                isinstance(cause, sqlite3.OperationalError) and "no such table" in str(cause)
            )
            if not dropped:
                raise
            self._rows.pop(name, None)
            return operation()

    # -- running totals (see totals.py) ---------------------------------------------------

    def _count(self, qid: int, sent: int = 0, received: int = 0, deleted: int = 0) -> None:
        self._totals.add(qid, sent, received, deleted)

    def _flush_counters(self, conn: sqlite3.Connection) -> None:
        conn.executemany(_COUNTS_SQL, self._totals.take())

    def close(self) -> None:
        if self._totals:
            try:
                with self._tx() as conn:
                    self._flush_counters(conn)
            except ConveyorError:
                pass
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
        self._local = threading.local()

    def wait_for_messages(self, queue: str, since: int, timeout: float) -> None:
        """Wake on a send in this process, or on any commit by another (PRAGMA data_version)."""
        if self.clock.manual:
            self.clock.sleep(timeout)
            return
        conn = self._conn()
        version = conn.execute("PRAGMA data_version").fetchone()[0]
        remaining = timeout
        while remaining > 0:
            step = min(remaining, 0.02)
            if HUB.wait(self.key, queue, since, step):
                return
            if conn.execute("PRAGMA data_version").fetchone()[0] != version:
                return
            remaining -= step
