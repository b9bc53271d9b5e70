"""The PostgreSQL store's connections between operations.

The store takes connections from its psycopg pool and keeps the idle ones in a list of its
own: an operation pops one and pushes it back, instead of going through the pool's locks,
statistics and checks (about 20 us an operation, a tenth of a small statement's client
cost). At most `size` connections are ever taken; when all are busy, an operation waits for
one to come back, as it would in the pool. A connection goes back to the pool when anything
is amiss (a transaction left open, a broken link: the pool resets or replaces it) and after
`keep` seconds (so the pool renews connections past their lifetime, and closes those that a
burst opened once they stay idle; a process with no operations at all keeps what it holds).
"""

from __future__ import annotations

import threading
from contextlib import suppress
from time import monotonic
from types import TracebackType
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from .connections import sent_unasked

Conn = psycopg.Connection[Any]
_IDLE = psycopg.pq.TransactionStatus.IDLE
_OK = psycopg.pq.ConnStatus.OK


class ClosedWhileIdle(psycopg.OperationalError):
    """The server had closed the connection an operation was about to use: nothing of the
    operation was sent."""


class ConnectionsBusy(PoolTimeout):
    """Every connection the store may take was in use for the pool's timeout."""


class HeldConnections:
    def __init__(self, pool: ConnectionPool[Any], size: int, timeout: float, keep: float) -> None:
        self._pool = pool
        self._size = size
        self._timeout = timeout
        self._keep = keep
        self._idle: list[tuple[Conn, float]] = []
        self._taken = 0  # connections out of the pool: in use, or idle here
        self._cond = threading.Condition()
        self._closed = False

    def borrow(self) -> tuple[Conn, float]:
        """A connection and when it was taken from the pool. One the server closed while it
        was idle (its `idle_session_timeout`, a proxy's or a firewall's idle timeout, a
        restart) is found so before anything is written to it, and raises ClosedWhileIdle:
        the operation is then retried as for a lost connection, but never in doubt (a send
        made on it would have been answered `OutcomeUnknown`). The pool is renewed, and the
        idle connections held here go back to it (`drain`: the others of its age likely
        went the same way), each connection out of it replaced as it returns."""
        conn, since = self._borrow()
        if closed_by_server(conn):
            with suppress(psycopg.Error):
                self._to_pool(conn)
            self.renew()
            raise ClosedWhileIdle("the server closed the connection while it was idle")
        return conn, since

    def renew(self) -> None:
        """Replace every connection: those in the pool and idle here now, the others as
        they come back to the pool."""
        self._pool.drain()
        self.release()

    def _borrow(self) -> tuple[Conn, float]:
        try:
            return self._idle.pop()
        except IndexError:
            pass
        deadline = monotonic() + self._timeout
        with self._cond:
            while True:
                try:
                    return self._idle.pop()
                except IndexError:
                    pass
                if self._taken < self._size:
                    self._taken += 1
                    break
                left = deadline - monotonic()
                if left <= 0:
                    raise ConnectionsBusy(
                        f"all {self._size} connections of this process stayed busy"
                    )
                self._cond.wait(left)
        try:
            return self._pool.getconn(), monotonic()
        except BaseException:
            self._returned()
            raise

    def give_back(self, conn: Conn, since: float) -> None:
        now = monotonic()
        if (
            not self._closed
            and conn.pgconn.transaction_status == _IDLE
            and now - since < self._keep
        ):
            self._idle.append((conn, since))
            # a waiter waits only while every connection is taken (its check and wait hold
            # the lock, so it either sees this one or is woken)
            if self._taken >= self._size:
                with self._cond:
                    self._cond.notify()
        else:
            self._to_pool(conn)
        # the list is used from its end: a connection left at its start since a burst goes
        # back to the pool once it is old, which closes it when it stays idle there
        idle = self._idle
        if idle and now - idle[0][1] >= self._keep:
            self._retire_oldest(now)

    def _retire_oldest(self, now: float) -> None:
        try:
            conn, since = self._idle.pop(0)
        except IndexError:
            return
        if now - since < self._keep:  # another thread changed the list meanwhile
            self._idle.append((conn, since))
            return
        self._to_pool(conn)

    def _to_pool(self, conn: Conn) -> None:
        try:
            self._pool.putconn(conn)
        finally:
            self._returned()

    def _returned(self) -> None:
        with self._cond:
            self._taken -= 1
            self._cond.notify()

    def release(self, *, closing: bool = False) -> None:
        """Hand every idle connection back to the pool (which checks them; dead ones go)."""
        self._closed = self._closed or closing
        while True:
            try:
                conn, _ = self._idle.pop()
            except IndexError:
                return
            with suppress(psycopg.Error):
                self._to_pool(conn)


def closed_by_server(conn: Conn) -> bool:
    """Whether the server has ended this idle connection (`sent_unasked`: the pool's
    connections LISTEN to nothing)."""
    pgconn = conn.pgconn
    if pgconn.status != _OK:
        return True
    try:
        return sent_unasked(pgconn.socket)
    except psycopg.OperationalError:
        return True


class Borrowed:
    """One operation's cursor, on a held connection; with `tx`, in a transaction committed
    on a clean exit and rolled back on an exception."""

    __slots__ = ("_conn", "_held", "_since", "_tx", "_txn")

    def __init__(self, held: HeldConnections, tx: bool) -> None:
        self._held = held
        self._tx = tx

    def __enter__(self) -> Any:
        conn, since = self._held.borrow()
        self._conn, self._since = conn, since
        try:
            if self._tx:
                self._txn = conn.transaction()
                self._txn.__enter__()
            return conn.cursor()
        except BaseException:  # a closed or broken connection: back to the pool
            self._held.give_back(conn, since)
            raise

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if self._tx:
                self._txn.__exit__(kind, exc, tb)
        finally:
            self._held.give_back(self._conn, self._since)
