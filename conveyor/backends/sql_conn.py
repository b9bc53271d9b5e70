"""What the PostgreSQL and MySQL stores share below the queue operations: running an
operation in a transaction with reconnection, the schema migrations, the queue cache and the
running totals."""

from __future__ import annotations

import logging
import random
import threading
import time
from abc import abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, suppress
from typing import Any, TypeVar

from ..clock import Clock
from ..exceptions import ConveyorError, QueueDoesNotExist, StoreUnavailable
from ..models import QueueAttributes
from .sql_schema import SCHEMA_VERSION, Dialect, migrations
from .totals import CountRow, RunningTotals

log = logging.getLogger("conveyor.store")

T = TypeVar("T")
Cursor = Any  # a DB-API cursor of psycopg or PyMySQL: both take %s parameters

# how long a queue's id and attributes are trusted before they are read again; changes made
# through this process apply at once, changes made by others within this time (as on SQS,
# where attribute changes take up to a minute to propagate)
QUEUE_CACHE_SECONDS = 1.0


class SQLConnections:
    """Mixed into `SQLBackend`. Drivers implement `_transaction` and classify errors."""

    clock: Clock
    scheme: str
    dialect: Dialect
    prefix: str
    display: str  # the store URL without its password, for logs and errors
    driver_errors: tuple[type[Exception], ...]  # what the driver and its pool raise
    reconnect_timeout: float

    def _init_connections(self) -> None:
        self._lock = threading.Lock()
        self._migrated = False
        self._queues: dict[str, tuple[float, int, QueueAttributes]] = {}
        self._totals = RunningTotals()
        self._swept: dict[int, float] = {}

    # -- what a driver provides -----------------------------------------------------------

    @abstractmethod
    def _transaction(self, tx: bool) -> AbstractContextManager[Cursor]:
        """A cursor on a pooled connection; with `tx`, inside a transaction committed on a
        clean exit and rolled back on an exception. Broken connections are discarded."""

    @abstractmethod
    def _retryable(self, exc: BaseException) -> str | None:
        """'disconnect' for a lost or refused connection, 'conflict' for a deadlock or
        serialization failure, 'busy' when every connection stayed in use (all retried),
        None for anything else."""

    @abstractmethod
    def _lock_schema(self, cur: Cursor) -> None:
        """Take the database-wide lock that serialises migrations (held until commit or
        until `_unlock_schema`)."""

    def _unlock_schema(self, cur: Cursor) -> None:
        pass

    def _on_disconnect(self) -> None:
        pass

    @abstractmethod
    def _connect_once(self) -> None:
        """Open one connection and close it: the first use of a store checks that the
        server is there, so a wrong URL fails at once instead of being retried."""

    # -- running operations ---------------------------------------------------------------

    def _run(self, fn: Callable[[Cursor], T], *, tx: bool = True) -> T:
        """Run `fn` on a cursor; on a lost connection or a conflict, run it again.

        Retries go on for `reconnect_timeout` seconds, so a database restart is waited out;
        the log says when the connection is lost and when it is back. Every operation given
        here is safe to run again: sends carry their ids (a second insert of the same id is
        ignored), and a receive whose first attempt committed unseen only delays those
        messages until their visibility timeout.
        """
        if not self._migrated:
            self.migrate()
        lost_at: float | None = None
        lost = False
        delay = 0.02
        while True:
            try:
                with self._transaction(tx) as cur:
                    result = fn(cur)
            except ConveyorError:
                raise
            except self.driver_errors as exc:
                kind = self._retryable(exc)
                if kind is None:
                    raise StoreUnavailable(
                        f"{self.scheme} store {self.display} failed: {exc}"
                    ) from exc
                now = time.monotonic()
                if lost_at is None:
                    lost_at = now
                    lost = kind == "disconnect"
                    if lost:
                        log.warning(
                            "lost the connection to %s (%s); reconnecting",
                            self.display,
                            first_line(exc),
                        )
                        self._on_disconnect()
                    elif kind == "busy":
                        log.warning("%s; waiting", first_line(exc))
                elif now - lost_at > self.reconnect_timeout:
                    raise StoreUnavailable(
                        _gave_up(kind, self.scheme, self.display, now - lost_at, exc)
                    ) from exc
                time.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, 1.0)
                continue
            if lost_at is not None and lost:  # a conflict retried is not worth a word
                log.warning(
                    "reconnected to %s after %.1f s", self.display, time.monotonic() - lost_at
                )
            return result

    # -- schema ---------------------------------------------------------------------------

    def migrate(self) -> tuple[int, int]:
        """Bring the database's tables to this version's schema; (old, new) version."""
        steps = migrations(self.dialect, self.prefix)
        table = f"{self.prefix}schema"

        def run(cur: Cursor) -> int:
            self._lock_schema(cur)
            try:
                cur.execute(
                    f"CREATE TABLE IF NOT EXISTS {table} (version INTEGER NOT NULL)"
                    f"{self.dialect.table_options}"
                )
                cur.execute(f"SELECT version FROM {table}")
                row = cur.fetchone()
                if row is None:
                    cur.execute(f"INSERT INTO {table} (version) VALUES (0)")
                current = 0 if row is None else int(row[0])
                if current > SCHEMA_VERSION:
                    raise StoreUnavailable(
                        f"the tables with prefix {self.prefix!r} in {self.display} have schema"
                        f" version {current}, newer than this Conveyor ({SCHEMA_VERSION}):"
                        " upgrade Conveyor"
                    )
                for version in range(current, SCHEMA_VERSION):
                    for statement in steps[version]:
                        cur.execute(statement)
                    cur.execute(f"UPDATE {table} SET version = %s", (version + 1,))
                return current
            finally:
                self._unlock_schema(cur)

        try:
            self._connect_once()
        except self.driver_errors as exc:
            raise StoreUnavailable(
                f"cannot connect to {self.scheme} store {self.display}: {first_line(exc)}"
                " (check the URL, and that the database server is running and reachable)"
            ) from exc
        self._migrated = True
        try:
            old = self._run(run)
        except BaseException:
            self._migrated = False
            raise
        return old, SCHEMA_VERSION

    # -- queue lookups --------------------------------------------------------------------

    def _lookup(self, name: str) -> tuple[int, QueueAttributes]:
        """The queue's id and attributes, from a cache refreshed every second."""
        hit = self._queues.get(name)
        now = time.monotonic()
        if hit is not None and now - hit[0] < QUEUE_CACHE_SECONDS:
            return hit[1], hit[2]
        return self._run(lambda cur: self._queue(cur, name), tx=False)

    def _queue(self, cur: Cursor, name: str, *, lock: bool = False) -> tuple[int, QueueAttributes]:
        cur.execute(
            f"SELECT id, attrs FROM {self.prefix}queues WHERE name = %s"
            + (" FOR UPDATE" if lock else ""),
            (name,),
        )
        row = cur.fetchone()
        if row is None:
            self._queues.pop(name, None)
            raise QueueDoesNotExist(f"queue {name!r} does not exist: create it first")
        hit = self._queues.get(name)
        attrs = (
            hit[2]
            if hit is not None and hit[1] == row[0] and hit[2].to_json() == row[1]
            else QueueAttributes.from_json(row[1])
        )
        self._queues[name] = (time.monotonic(), int(row[0]), attrs)
        return int(row[0]), attrs

    def _forget(self, name: str) -> None:
        self._queues.pop(name, None)

    # -- running totals (see totals.py) ---------------------------------------------------

    def _count(self, qid: int, sent: int = 0, received: int = 0, deleted: int = 0) -> None:
        if self._totals.add(qid, sent, received, deleted):
            self._flush()

    def _write_counts(self, cur: Cursor, rows: Sequence[CountRow]) -> None:
        if rows:
            cur.executemany(
                f"UPDATE {self.prefix}queues SET sent = sent + %s, received = received + %s,"
                " deleted = deleted + %s WHERE id = %s",
                rows,
            )

    def _flush(self) -> None:
        rows = self._totals.take()
        if rows:
            self._run(lambda cur: self._write_counts(cur, rows))

    def _names(self, table: str, prefix: str) -> list[str]:
        """The names in a table of queues or topics that start with `prefix`, sorted."""

        def run(cur: Cursor) -> list[str]:
            cur.execute(f"SELECT name FROM {self.prefix}{table}")
            return [r[0] for r in cur.fetchall()]

        return sorted(n for n in self._run(run, tx=False) if n.startswith(prefix))

    @abstractmethod
    def _close_pool(self) -> None: ...

    def close(self) -> None:
        with suppress(Exception):  # counts are best effort when the database is gone
            self._flush()
        self._close_pool()


def in_list(values: Sequence[Any]) -> str:
    """``%s, %s, ...`` for an IN (...) of `values`."""
    return ", ".join(["%s"] * len(values))


def _gave_up(kind: str, scheme: str, display: str, seconds: float, exc: BaseException) -> str:
    """Why an operation retried for `reconnect_timeout` gave up, and what to do."""
    if kind == "busy":
        return (
            f"{scheme} store {display}: {first_line(exc)} for {seconds:.0f} s: raise pool_size"
            " in the store URL, or run fewer operations at once in this process"
        )
    if kind == "conflict":
        return (
            f"{scheme} store {display}: an operation kept conflicting with others for"
            f" {seconds:.0f} s ({first_line(exc)}): retry it"
        )
    return (
        f"{scheme} store {display} has been unreachable for {seconds:.0f} s ({exc}): check"
        " that the database server is running and reachable"
    )


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]
