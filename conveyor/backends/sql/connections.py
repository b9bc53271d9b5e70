"""How the SQL store reaches its database: an `Exec` per operation (statements compiled for
its driver, `statement.py`, with their parameters by name), and a `Connections` object that
runs operations in transactions.

Each database supplies its own `Connections`: SQLite's per-thread connections with
``BEGIN IMMEDIATE``; and, for PostgreSQL and MySQL, `ServerConnections`, which runs an
operation on a pooled connection and runs it again on a lost connection or a conflict.
"""

from __future__ import annotations

import logging
import random
import select
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeAlias, TypeVar

from ...exceptions import ConveyorError, InvalidInput, StoreUnavailable
from ...notify import HUB
from ..base import Inline
from .rows import Row
from .statement import execute, positional

if TYPE_CHECKING:
    import asyncio

log = logging.getLogger("conveyor.store")

T = TypeVar("T")

Stopped = Literal["lock", "cancelled", "full", "shared"]

LOCK_TIMEOUT = 30.0
"""Seconds a statement of a database server's store waits for a lock that another session
holds (a transaction left open, a LOCK TABLE, a schema change) before its call fails, where
the URL does not say (``lock_timeout``)."""


def lock_timeout(scheme: str, params: dict[str, str]) -> float:
    """The ``lock_timeout`` option of a store URL, taken out of `params`: seconds, 1 to 3600."""
    text = params.pop("lock_timeout", None)
    if text is None:
        return LOCK_TIMEOUT
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not 1 <= seconds <= 3600:
        raise InvalidInput(
            f"{scheme} store option lock_timeout must be a number of seconds from 1 to 3600"
            f" (how long a call waits for a lock another session holds), got {text!r}"
        )
    return seconds


# a statement's parameters: by name (statements.py); in order for the few texts that take
# them so (a pragma, a probe of the server)
Params: TypeAlias = Mapping[str, Any] | Sequence[Any]


class Exec(ABC):
    """One operation's access to its database, inside the operation's transaction (or in
    autocommit for reads and single statements). Statements come compiled for the driver
    (`Dialect.sql`), their parameters given by name.

    `in_doubt`: an earlier attempt of this operation lost its connection after it began, so
    it may have committed (only the answer was lost). A write that cannot run twice checks
    what that attempt left before it runs again."""

    in_doubt = False

    @abstractmethod
    def rows(self, sql: str, params: Params = ()) -> list[Row]:
        """Run a statement that returns rows (a SELECT, or a change RETURNING); its rows."""

    def one(self, sql: str, params: Params = ()) -> Row | None:
        """Run a statement; its first row, or None."""
        found = self.rows(sql, params)
        return found[0] if found else None

    @abstractmethod
    def run(self, sql: str, params: Params = ()) -> int:
        """Run a statement; how many rows it changed."""

    @abstractmethod
    def run_many(self, sql: str, rows: Sequence[Params]) -> None:
        """Run a statement once per row of parameters."""


E = TypeVar("E", bound=Exec)


class CursorExec(Exec):
    """An `Exec` on a DB-API cursor (psycopg, PyMySQL): parameters ``%(name)s``, or ``%s``
    bound by position from the named values (`positional`)."""

    __slots__ = ("cur", "in_doubt")

    def __init__(self, cur: Any, in_doubt: bool = False) -> None:
        self.cur = cur
        self.in_doubt = in_doubt

    def rows(self, sql: str, params: Params = ()) -> list[Row]:
        # only statements that return rows come here; asking the cursor for its description
        # first would cost a column object per column on psycopg
        cur = self.cur
        execute(cur, sql, params)
        found = cur.fetchall()
        return found if type(found) is list else list(found)

    def run(self, sql: str, params: Params = ()) -> int:
        execute(self.cur, sql, params)
        return int(self.cur.rowcount)

    def run_many(self, sql: str, rows: Sequence[Params]) -> None:
        if rows:
            self.cur.executemany(sql, [positional(sql, row) for row in rows])


class Connections(ABC, Generic[E]):
    """Runs a store's operations on its database."""

    display: str  # the store URL without its password, for logs and errors

    @abstractmethod
    def check(self) -> None:
        """Reach the database once, so that a wrong URL fails at once with StoreUnavailable
        saying what to check, instead of being retried."""

    @abstractmethod
    def read(self, fn: Callable[[E], T]) -> T:
        """Run `fn` outside a transaction (each statement sees committed data)."""

    @abstractmethod
    def write(self, fn: Callable[[E], T], *, single: bool = False, durable: bool = True) -> T:
        """Run `fn` in one transaction, committed when it returns and rolled back when it
        raises. `fn` may run more than once (after a lost connection or a conflict), so it
        must be safe to repeat. `single`: `fn` runs one statement, which needs no explicit
        transaction where the database commits each statement on its own. `durable` False:
        the commit need not wait for the disk (a power cut may undo it; SQLite at
        durability=full relaxes its sync for such commits)."""

    @abstractmethod
    def close(self) -> None:
        """Close every connection."""

    one_writer = False
    """Whether the database makes one write at a time (`Backend.one_writer`)."""
    commits_on_loop = False
    """Whether calls may run on an event loop's thread (`LoopCommits`): a local file that
    never makes a call wait without saying so."""

    def inline(self) -> AbstractContextManager[Inline]:
        """See `LoopCommits.inline`: only where `commits_on_loop`."""
        raise NotImplementedError(f"{type(self).__name__} does not commit on an event loop")

    def on_loop(self) -> bool:
        """Whether this thread is running a call inline, on an event loop's thread."""
        return False

    def gather(self, call: Callable[[], T]) -> asyncio.Future[T] | None:
        """See `LoopCommits.gather`: None unless the database has a writer of its own."""
        return None

    def gathering(self) -> bool:
        """See `LoopCommits.gathering`."""
        return False

    def after_commit(self, fn: Callable[[], object]) -> bool:
        """Inside a write that shares a transaction not yet committed (gathered with others,
        `gather`, or in an event loop's turn), hold `fn()` until that transaction has
        committed and say True; elsewhere say False (the write has committed: the caller
        runs it now)."""
        return False

    def if_undone(self, fn: Callable[[], object]) -> bool:
        """Inside a write that shares a transaction not yet committed (as `after_commit`),
        hold `fn()` until that transaction fails to commit (or is rolled back) and say True;
        elsewhere say False (the write has committed)."""
        return False

    def announce(self, key: str, queue: str) -> None:
        """After a commit that may have made messages of `queue` ready: tell other
        processes' long polls. The generic version does nothing (databases that notify
        inside the transaction, `Dialect.notify_waiters`, need nothing more)."""

    def wait(self, key: str, queue: str, since: int, timeout: float) -> None:
        """Block until a send to `queue` may have made a message ready, or `timeout`. The
        generic version waits for a send in this process."""
        HUB.wait(key, queue, since, timeout)

    async def wait_async(
        self, key: str, queue: str, since: int, timeout: float, interval: float
    ) -> None:
        """`wait` in the event loop; a ticker retries every `interval`."""
        await HUB.wait_async(key, queue, since, timeout, interval)

    def last_write(self, fn: Callable[[E], object]) -> None:
        """Run a last write as the store is garbage-collected or the process exits (counts
        not yet written). Best effort; the generic version does nothing."""


class ServerConnections(Connections[CursorExec]):
    """Connections to a database server: an operation runs on a pooled connection and runs
    again on a lost connection or a conflict, for up to `reconnect_timeout` seconds."""

    scheme: str
    reconnect_timeout: float
    lock_timeout: float  # seconds a statement waits for another session's lock
    lock_hint: str  # where an operator finds the session that holds a lock
    timeout_setting: str  # the server's setting that cancels long statements
    driver_errors: tuple[type[Exception], ...]  # what the driver and its pool raise

    @abstractmethod
    def _transaction(self, tx: bool) -> AbstractContextManager[Any]:
        """A cursor on a pooled connection; with `tx`, inside a transaction committed on a
        clean exit and rolled back on an exception. Broken connections are discarded."""

    @abstractmethod
    def _retryable(self, exc: BaseException) -> str | None:
        """'disconnect' for a lost or refused connection, 'conflict' for a deadlock or
        serialization failure, 'busy' when every connection stayed in use, 'crowded' when
        the server refused a new connection at its connection limit, 'read-only' for a
        write a read-only server refused before doing any of it (a standby the address led
        to; all retried), None for anything else."""

    @abstractmethod
    def _stopped(self, exc: BaseException) -> Stopped | None:
        """How the database refused a statement and rolled its transaction back, where
        `exc` says it did: "lock" (it waited `lock_timeout` for another session's lock),
        "cancelled" (a statement timeout set on the server, or an operator's cancel),
        "full" (the server's disk) or "shared" (its session was not its own: a pooler in
        transaction mode). Not retried, nor taken for a lost connection (whose
        commit may have happened): the same wait, timeout or full disk would come again."""

    @abstractmethod
    def _connect_once(self) -> None:
        """Open one connection and close it."""

    def _on_disconnect(self) -> None:
        """Drop idle connections that died with the server."""

    def _why_unreachable(self, exc: BaseException) -> BaseException:
        """What the server says to a new connection, where `exc` does not say why none
        could be had (a pool's timeout): `exc` itself elsewhere."""
        return exc

    def _on_read_only(self) -> None:
        """Drop idle connections to a server that takes no writes (a primary demoted in a
        failover, which the address now leads past), so that new ones find the primary."""
        self._on_disconnect()

    def check(self) -> None:
        try:
            self._connect_once()
        except self.driver_errors as exc:
            hint = (
                CROWDED_HINT
                if self._retryable(exc) == "crowded"
                else "check the URL, and that the database server is running and reachable"
            )
            raise StoreUnavailable(
                f"cannot connect to {self.scheme} store {self.display}: {first_line(exc)} ({hint})"
            ) from exc

    def read(self, fn: Callable[[CursorExec], T]) -> T:
        return self._run(fn, False)

    def last_write(self, fn: Callable[[CursorExec], object]) -> None:
        """One attempt (the process may be ending), nothing said if it fails: the counts it
        held are what is lost. A connection found closed before anything was sent on it
        (the server's idle timeout, while the process idled) is replaced, once."""
        for attempt in (1, 2):
            began = False
            try:
                with self._transaction(True) as cur:
                    began = True
                    fn(CursorExec(cur))
                return
            except Exception as exc:
                if attempt == 1 and not began and self._retryable(exc) == "disconnect":
                    continue
                log.debug("last write to %s failed: %s", self.display, first_line(exc))
                return

    def write(
        self, fn: Callable[[CursorExec], T], *, single: bool = False, durable: bool = True
    ) -> T:
        return self._run(fn, not single)

    def _run(self, fn: Callable[[CursorExec], T], tx: bool) -> T:
        """Run `fn` on a cursor; on a lost connection or a conflict, run it again.

        Retries go on for `reconnect_timeout` seconds, so a database restart is waited out;
        the log says when the connection is lost and when it is back.
        """
        lost_at: float | None = None
        lost = False
        delay = 0.02
        in_doubt = False
        while True:
            began = False
            try:
                with self._transaction(tx) as cur:
                    began = True
                    result = fn(CursorExec(cur, in_doubt))
            except ConveyorError:
                if lost_at is not None and lost:  # it ran: the connection is back
                    self._reconnected(lost_at)
                raise
            except self.driver_errors as exc:
                stopped = self._stopped(exc)  # on purpose: neither retried nor in doubt
                if stopped is not None:
                    raise StoreUnavailable(self._why_stopped(stopped, exc)) from exc
                kind = self._retryable(exc)
                # a connection lost once statements were sent: they may have committed
                in_doubt = in_doubt or (began and kind == "disconnect")
                if kind is None:
                    raise StoreUnavailable(
                        f"{self.scheme} store {self.display} failed: {exc}"
                    ) from exc
                now = time.monotonic()
                if kind == "read-only":  # every time: each connection may lead to the old host
                    self._on_read_only()
                if lost_at is None:
                    lost_at = now
                    lost = kind in ("disconnect", "read-only")
                    if kind == "busy":
                        log.warning("%s; waiting", first_line(exc))
                    elif kind in WAITING:
                        log.warning(WAITING[kind], self.display, first_line(exc))
                    if kind == "disconnect":
                        self._on_disconnect()
                elif now - lost_at > self.reconnect_timeout:
                    why = self._why_unreachable(exc)
                    kind = self._retryable(why) or kind
                    raise StoreUnavailable(
                        _gave_up(kind, self.scheme, self.display, now - lost_at, why)
                    ) from exc
                time.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, 1.0)
                continue
            if lost_at is not None and lost:  # a conflict retried is not worth a word
                self._reconnected(lost_at)
            return result

    def _why_stopped(self, stopped: Stopped, exc: BaseException) -> str:
        if stopped == "lock":
            return (
                f"{self.scheme} store {self.display}: a statement waited {self.lock_timeout:g} s"
                f" (lock_timeout) for a lock that another session holds ({first_line(exc)}),"
                " and its transaction was rolled back. Look for a transaction left open, a"
                f" LOCK TABLE or a schema change ({self.lock_hint}), or raise lock_timeout in"
                " the store's URL"
            )
        if stopped == "shared":
            return (
                f"{self.scheme} store {self.display}: the store's session was shared with"
                f" other clients ({first_line(exc)}), and the transaction was rolled back: a"
                " connection pooler in transaction mode (PgBouncer's pool_mode = transaction)"
                " hands each transaction to any server connection, and the store needs the"
                " same one for its prepared statements, settings and LISTEN. Give the store a"
                " pool in session mode, or the database's own address"
            )
        if stopped == "full":
            return (
                f"{self.scheme} store {self.display}: the database server's disk is full"
                f" ({first_line(exc)}), and the transaction was rolled back: free space on"
                " the server's disk (calls that only read go on meanwhile)"
            )
        return (
            f"{self.scheme} store {self.display}: the database cancelled a statement"
            f" ({first_line(exc)}), and its transaction was rolled back: a statement timeout"
            f" set on the server for this user or database ({self.timeout_setting}), or an"
            " operator's cancel. Lift or raise the timeout for the store's user, or retry"
        )

    def _reconnected(self, lost_at: float) -> None:
        log.warning("reconnected to %s after %.1f s", self.display, time.monotonic() - lost_at)


# what the log says once as a retried operation starts waiting (the store, the error)
WAITING = {
    "disconnect": "lost the connection to %s (%s); reconnecting",
    "read-only": "%s takes no writes (%s): a standby after a failover?; reconnecting",
    "crowded": "%s has no connections to spare (%s); waiting",
}

CROWDED_HINT = (
    "raise the server's max_connections (or the user's limit), or lower the store's pool_size"
    " or the number of processes using it"
)


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
    if kind == "crowded":
        return (
            f"{scheme} store {display}: the database server has had no connections to spare"
            f" for {seconds:.0f} s ({first_line(exc)}): {CROWDED_HINT}"
        )
    if kind == "read-only":
        return (
            f"{scheme} store {display} has taken no writes for {seconds:.0f} s"
            f" ({first_line(exc)}): the URL leads to a standby or a read-only server; give"
            " it the primary's address (or every host, which the store tries in turn)"
        )
    return (
        f"{scheme} store {display} has been unreachable for {seconds:.0f} s ({exc}): check"
        " that the database server is running and reachable"
    )


def sent_unasked(fd: int) -> bool:
    """Whether an idle connection's socket has something to read. Between statements a
    database server sends nothing unasked but the error that says it is closing the
    connection (an idle timeout, a restart) and the end of the stream, so a connection whose
    socket reads is closed, or closing: found so before a write is sent on it, which would
    otherwise be left in doubt. About half a microsecond."""
    poll = select.poll()
    poll.register(fd, select.POLLIN)
    return bool(poll.poll(0))


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
