"""The SQLite file of the embedded store (`conveyor.backends.sql.sqlite`): one connection per
thread, write transactions, and the order in which the writes of threads, event loops and
processes take its one write lock.

Writes of one process are committed in groups: while one thread's transaction runs, the
writes other threads ask for wait, and the next of them runs them all in one transaction
(each in a savepoint of its own, so one failing changes nothing of the others), with one
commit, and so one fsync at durability=full, for all. Nothing is acknowledged before its
commit.

An event loop may call the store on its own thread (`inline`): there a write that would
wait for another writer raises `WouldBlock` instead. The short writes of one turn of the
loop (sends, receives, deletes, visibility changes: `Inline.short`) share one transaction
(`_Turn`): the first opens it, each runs in a savepoint of its own, and it is committed at
the loop's next turn; each call leaves its caller a future to await, resolved after that
commit. At durability=full a commit made on the loop does not wait for the disk: the
store's fsync helper (sqlite_sync.py) fsyncs the write-ahead log and then resolves the
futures of every commit handed over before it began. A short write the loop cannot make at
once (another process holds the lock) is handed to the store's writer thread (`gather`),
which runs every write handed over meanwhile in one transaction once it has the lock; until
that has committed, later writes of the loop join it.

Between processes, a write that finds the lock taken waits `FINE_AFTER` in SQLite's busy
handler, then tries in short steps, and after `TURN_AFTER` takes the file's turn: the others
hold back until it has the lock (sqlite_turnstile.py).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ...exceptions import InvalidInput, StoreUnavailable
from ...forks import renew_after_fork
from ...notify import HUB
from ...tuning import keep_heap
from ..base import Inline, RunAgain, WouldBlock
from .connections import Connections, Exec, Params
from .rows import Row
from .sqlite_checkpoints import AUTOCHECKPOINT, Checkpointer
from .sqlite_sync import LogFile, Syncer, Worker, settle_all
from .sqlite_turnstile import FINE_AFTER, TURN_AFTER, Turnstile, short_tries
from .statement import execute, positional
from .wakes import Wakes

if TYPE_CHECKING:  # the event loop's parts import it themselves: the SDK runs without it
    import asyncio

    from ...commits import CommitWait
    from .sqlite_sync import Outcome

T = TypeVar("T")
log = logging.getLogger("conveyor.sqlite")
LOCK_WAITED = 0.001  # seconds a BEGIN took that say it waited for the lock


# what to do about the errors an operator can do something about, by SQLite's error names
ADVICE = {
    "SQLITE_FULL": "its disk is full: free space there or move the store; reads go on meanwhile",
    "SQLITE_READONLY": "it cannot be written: the server's user needs write access to the file,"
    " its directory and its -wal and -shm files",
    "SQLITE_CANTOPEN": "check that its directory exists and that the server's user may write there",
    "SQLITE_IOERR": "the system reported an I/O error: check the disk and its file system",
    "SQLITE_CORRUPT": "the file is damaged: restore it from a backup (the sqlite3 shell's .recover"
    " saves what can be read)",
    "SQLITE_NOTADB": "not a SQLite database: give --store a Conveyor store or a new file",
}


def running_loop_or_block() -> asyncio.AbstractEventLoop:
    """The event loop running on this thread; `WouldBlock` where there is none (a process
    that never imported asyncio runs none)."""
    aio = sys.modules.get("asyncio")
    if aio is None:
        raise WouldBlock
    try:
        loop: asyncio.AbstractEventLoop = aio.get_running_loop()
    except RuntimeError:
        raise WouldBlock from None
    return loop


def commit_wait(loop: asyncio.AbstractEventLoop) -> CommitWait:
    from ...commits import CommitWait  # imported where an event loop runs

    return CommitWait(loop=loop)


def failure(what: str, exc: sqlite3.Error) -> StoreUnavailable:
    """StoreUnavailable saying `what` happened in SQLite's words, and what to do where the
    error's name tells (a full disk, a file that cannot be written)."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    advice = next((text for key, text in ADVICE.items() if name.startswith(key)), None)
    return StoreUnavailable(f"{what}: {exc}" + (f" ({advice})" if advice else ""))


class SQLiteExec(Exec):
    """An `Exec` on a sqlite3 connection: named values bound by position (`positional`)."""

    __slots__ = ("conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def rows(self, sql: str, params: Params = ()) -> list[Row]:
        return execute(self.conn, sql, params).fetchall()

    def run(self, sql: str, params: Params = ()) -> int:
        return execute(self.conn, sql, params).rowcount

    def run_many(self, sql: str, rows: Sequence[Params]) -> None:
        self.conn.executemany(sql, [positional(sql, row) for row in rows])


class _Batch:
    """What the gathered calls of one transaction leave for after its commit."""

    __slots__ = ("durable", "later", "undone", "waited")

    def __init__(self) -> None:
        self.later: list[Callable[[], object]] = []  # once committed: wake-ups, counts
        self.undone: list[Callable[[], object]] = []  # if not committed (`if_undone`)
        self.durable = False  # a write must reach the disk before it is answered
        self.waited = True  # the lock was taken when the transaction began


class _Gathered(Worker):
    """Calls an event loop handed over (`SQLiteConnections.gather`): a thread of the store's
    takes the write lock once for all of them, runs each (its writes in savepoints of that
    transaction) and resolves their futures after the commit. While another process holds
    the lock, the loop goes on parsing requests, and every write that meets the lock taken
    joins the next transaction instead of a thread of its own that retries it. Once a
    transaction found the lock free at once, the calls that came meanwhile are handed back
    (`RunAgain`): the loop writes itself again (a hand-over between threads costs more than
    the write), where it would otherwise have handed over every write while more came
    during each transaction."""

    name = "conveyor-sqlite-writer"

    def __init__(self, db: SQLiteConnections) -> None:
        super().__init__()
        self.db = db
        self._calls: list[tuple[Callable[[], Any], asyncio.Future[Any]]] = []
        self._active = False  # calls wait or run

    def submit(self, call: Callable[[], T]) -> asyncio.Future[T]:
        import asyncio

        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        with self._lock:
            self._calls.append((call, future))
            self._active = True
            self._hand()
        return future

    def busy(self) -> bool:
        """Whether calls wait here or run (a write on the loop would meet the lock taken)."""
        return self._active

    def _take(self) -> list[tuple[Callable[[], Any], asyncio.Future[Any]]]:
        with self._lock:
            calls, self._calls = self._calls, []
        return calls

    def _run(self) -> None:
        while self._await_work(lambda: bool(self._calls)):
            calls = self._take()
            outcomes, waited = self._batch(calls)
            back: list[tuple[Callable[[], Any], asyncio.Future[Any]]] = []
            with self._lock:
                if not waited:
                    back, self._calls = self._calls, []
                self._active = bool(self._calls)
            settle_all(outcomes + [(future, None, RunAgain()) for _, future in back])

    def _batch(
        self, calls: list[tuple[Callable[[], Any], asyncio.Future[Any]]]
    ) -> tuple[list[Outcome], bool]:
        """Run `calls`, and those that come until the lock is taken, in one transaction;
        their outcomes, and whether the lock was taken when the transaction began."""
        outcomes: list[Outcome] = []
        batch = _Batch()
        db = self.db

        def run_all(ex: SQLiteExec) -> None:
            calls.extend(self._take())  # what came while the lock was being taken
            local = db._local.s  # of the thread that runs the transaction (this or a leader)
            batch.waited = local.waited
            local.gathered = batch
            try:
                for call, future in calls:
                    try:
                        outcomes.append((future, call(), None))
                    except Exception as exc:
                        outcomes.append((future, None, exc))
            finally:
                local.gathered = None

        error: BaseException | None
        try:
            # committed without SQLite's fsync; the log is fsynced below if a write needs it
            db.write(run_all, durable=False)
        except BaseException as exc:  # nothing was committed
            error = exc
            run_each(batch.undone)
        else:
            error = db.log.sync() if db._full and batch.durable else None
        if error is not None:
            return [(future, None, error) for _, future in calls], True
        run_each(batch.later)
        return outcomes, batch.waited


class _Turn:
    """The transaction the short writes of one turn of an event loop share, on the loop's
    connection: opened by the first, committed at the loop's next turn (`SQLiteConnections.
    _end_turn`). `done` is what their callers await."""

    __slots__ = ("conn", "done", "durable", "later", "undone", "writes")

    def __init__(self, conn: sqlite3.Connection, loop: asyncio.AbstractEventLoop) -> None:
        self.conn = conn
        self.done = commit_wait(loop)
        self.durable = False  # a write must reach the disk before it is answered
        self.later: list[Callable[[], object]] = []  # once committed: wake-ups, counts
        self.undone: list[Callable[[], object]] = []  # if not committed (`if_undone`)
        self.writes = 0


class _ThreadState:
    """A store's state in one thread: its connection, and what the thread is doing (a
    plain object: each attribute of a `threading.local` is a lookup of its own)."""

    __slots__ = ("call", "ex", "gathered", "inline", "no_wait", "turn", "waited")

    def __init__(self) -> None:
        self.ex: SQLiteExec | None = None
        self.gathered: _Batch | None = None  # the transaction gathered calls share
        self.inline = False  # running on an event loop's thread
        self.call: Inline | None = None  # that inline call (set while `inline`)
        self.no_wait = False  # the connection's busy timeout 0 (inline)
        self.waited = False  # the last BEGIN waited for the lock (not inline)
        self.turn: _Turn | None = None  # the loop's open transaction (on its thread)


class _PerThread(threading.local):
    """Each thread's `_ThreadState`, made when the thread first looks."""

    def __init__(self) -> None:
        self.s = _ThreadState()


class _Write:
    """One write waiting for its group's commit."""

    __slots__ = ("durable", "error", "fn", "latch", "lead", "result")

    def __init__(self, fn: Callable[[SQLiteExec], Any], durable: bool) -> None:
        self.fn = fn
        self.durable = durable
        self.result: Any = None
        self.error: BaseException | None = None
        self.lead = False  # woken to run the next group rather than finished
        self.latch = threading.Lock()  # released when done, or to run the next group
        self.latch.acquire()

    def outcome(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.result


class SQLiteConnections(Connections[SQLiteExec]):
    """One connection per thread; writes in `BEGIN IMMEDIATE` transactions."""

    commits_on_loop = True
    one_writer = True

    def __init__(self, path: str, *, durability: str, busy_timeout: float, heap: bool) -> None:
        if durability not in ("full", "normal"):
            raise InvalidInput(f"durability must be 'full' or 'normal', got {durability!r}")
        self.path = path if path == ":memory:" else os.path.abspath(path)
        self.display = f"sqlite:///{self.path}"
        self.wal = self.path + "-wal"  # the write-ahead log, fsynced for durable commits
        # an in-memory database has no file to fsync: nothing of it survives its process
        self.durability = "normal" if self.path == ":memory:" else durability
        self._full = self.durability == "full"  # a durable commit fsyncs the log
        self._busy_ms = int(busy_timeout * 1000)
        # what a connection waits for the lock before its write takes the turn (where there
        # is a turn file: set with it, at the first connection)
        self._wait_ms = self._busy_ms
        self._heap = heap
        self.commits = 0  # write transactions committed by this process (groups count once)
        self._own()
        renew_after_fork(self)

    def _own(self) -> None:
        """This process's connections, group commit, helpers and wake socket."""
        self._local = _PerThread()
        self._lock = threading.Lock()
        self._connections: list[sqlite3.Connection] = []
        # group commit: writes waiting for the running group to commit, and whether one runs
        self._group_lock = threading.Lock()
        self._waiting: list[_Write] = []
        self._leading = False
        self._syncer = Syncer(self.wal)
        # fsynced by the thread that commits a durable write (durability=full)
        self.log = LogFile(self.wal)
        self._turns: set[_Turn] = set()  # open, on any event loop's thread
        self._gathered = _Gathered(self)
        self.checkpointer = Checkpointer(self)
        self._wakes = Wakes(os.path.realpath(self.path), time.monotonic, beside=self.path)
        self._turnstile: Turnstile | None = None
        self._turnstile_looked = self.path == ":memory:"  # one connection: no turns

    def forked(self) -> None:
        """A forked child: SQLite's connections must not be used across a fork, so the
        parent's are forgotten, with its threads' state (forks.py). An in-memory database
        is the child's own copy already (a new connection would find it empty)."""
        if self.path != ":memory:":
            self._own()

    @property
    def fsyncs(self) -> int:
        """fsyncs of the log made for commits on event loops at durability=full."""
        return self._syncer.fsyncs

    def exec(self) -> SQLiteExec:
        """This thread's connection (opened on first use)."""
        ex = self._local.s.ex
        if ex is not None:
            return ex
        if self._heap:
            keep_heap()
        parent = os.path.dirname(self.path)
        if parent and not os.path.isdir(parent):
            raise StoreUnavailable(
                f"cannot open SQLite store {self.path}: directory {parent} does not exist"
            )
        if not self._turnstile_looked:
            with self._lock:
                if not self._turnstile_looked:
                    self._turnstile = Turnstile.open(self.path)
                    if self._turnstile is not None:
                        self._wait_ms = min(self._busy_ms, int(FINE_AFTER * 1000))
                    self._turnstile_looked = True
        try:
            conn = sqlite3.connect(
                self.path,
                isolation_level=None,
                check_same_thread=False,
                timeout=self._busy_ms / 1000,
                # each queue is a table with statements of its own: room for a few hundred
                # queues in use at once (about 2 KiB a statement, 4 MiB when full)
                cached_statements=2048,
            )
            conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
            conn.execute("PRAGMA journal_mode = WAL")  # on a new file, with the lock
            # SQLite fsyncs the log only for checkpoints: at durability=full a durable
            # commit fsyncs it itself, once committed (`_transaction`, the fsync helper)
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA cache_size = -32000")
            # SQLite's busy handler for a write's first tries (`begin`); a read that meets
            # the lock (rare in WAL: another connection's recovery) waits on (`read`)
            conn.execute(f"PRAGMA busy_timeout = {self._wait_ms}")
        except sqlite3.Error as exc:
            raise failure(f"cannot open SQLite store {self.path}", exc) from exc
        ex = self._local.s.ex = SQLiteExec(conn)
        with self._lock:
            self._connections.append(conn)
        return ex

    def check(self) -> None:
        self.exec()

    def read(self, fn: Callable[[SQLiteExec], T]) -> T:
        local = self._local.s
        turn = local.turn
        if turn is not None:  # on the loop's connection: what it reads is not committed yet
            if local.inline:
                call = local.call
                assert call is not None
                if call.durable is None:
                    call.durable = turn.done
            else:
                self._end_turn(turn)
        try:
            return fn(self.exec())
        except sqlite3.OperationalError as exc:
            if _busy(exc):
                if self._local.s.inline:
                    raise WouldBlock from exc
                if self._wait_ms < self._busy_ms:
                    return self._read_waiting(fn)
            raise failure(f"SQLite store {self.path} failed", exc) from exc
        except sqlite3.Error as exc:
            raise failure(f"SQLite store {self.path} failed", exc) from exc

    def _read_waiting(self, fn: Callable[[SQLiteExec], T]) -> T:
        """`fn` again, with SQLite's busy handler waiting the whole busy timeout."""
        ex = self.exec()
        ex.conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
        try:
            return fn(ex)
        except sqlite3.Error as exc:
            raise failure(f"SQLite store {self.path} failed", exc) from exc
        finally:
            ex.conn.execute(f"PRAGMA busy_timeout = {self._wait_ms}")

    @contextlib.contextmanager
    def _inline(self) -> Iterator[Inline]:
        local = self._local.s
        call = local.call = Inline()
        local.inline = True
        try:
            yield call
        finally:
            local.inline = False
            local.call = None

    def inline(self) -> contextlib.AbstractContextManager[Inline]:
        return self._inline()

    def on_loop(self) -> bool:
        """Whether this thread is running a call inline, on an event loop's thread."""
        return self._local.s.inline

    def gather(self, call: Callable[[], T]) -> asyncio.Future[T]:
        return self._gathered.submit(call)

    def gathering(self) -> bool:
        return self._gathered.busy()

    def after_commit(self, fn: Callable[[], object]) -> bool:
        """Hold `fn` for the commit of the transaction this thread's write shares (gathered
        calls', or an event loop's turn); False where it shares none."""
        batch = self._shared()
        if batch is not None:
            batch.later.append(fn)
        return batch is not None

    def if_undone(self, fn: Callable[[], object]) -> bool:
        """Hold `fn` for the failure of the transaction this thread's write shares, as
        `after_commit`."""
        batch = self._shared()
        if batch is not None:
            batch.undone.append(fn)
        return batch is not None

    def _shared(self) -> _Batch | _Turn | None:
        """The transaction this thread's write shares (gathered calls', or an event loop's
        turn), if any."""
        local = self._local.s
        return local.gathered or local.turn

    def _savepoint(self, ex: SQLiteExec, fn: Callable[[SQLiteExec], T]) -> T:
        """Run `fn` in a savepoint of the open transaction: one write of several that share
        it (a group, gathered calls), undone alone if it raises (SQLite's own errors raised
        as StoreUnavailable)."""
        conn = ex.conn
        conn.execute("SAVEPOINT w")
        try:
            return fn(ex)
        except BaseException as exc:
            conn.execute("ROLLBACK TO w")
            if isinstance(exc, sqlite3.Error):
                raise failure(f"SQLite store {self.path} failed", exc) from exc
            raise
        finally:
            conn.execute("RELEASE w")

    def write(
        self, fn: Callable[[SQLiteExec], T], *, single: bool = False, durable: bool = True
    ) -> T:
        local = self._local.s
        call = local.call
        inline = False
        if call is not None or local.gathered is not None or local.turn is not None:
            batch = local.gathered
            if batch is not None:
                batch.durable = batch.durable or durable
                return self._savepoint(self.exec(), fn)  # in the transaction the calls share
            inline = local.inline
            if call is not None and call.lazy:  # answered once committed (`Inline.lazy`)
                durable = False
            if call is not None and call.short:
                return self._in_turn(fn, durable, call)
            if not inline and local.turn is not None:  # the loop's thread, outside `inline`
                self._end_turn(local.turn)
            if call is not None and durable and self._full:
                loop = running_loop_or_block()  # the loop to await the disk on
                # commit now, without SQLite's fsync; the caller awaits the log's fsync
                committed = self.write(fn, single=single, durable=False)
                if call.durable is None:
                    call.durable = commit_wait(loop)
                    self._syncer.after(call.durable)
                return committed
        with self._group_lock:
            if not (self._leading or (inline and self._gathered.busy())):
                self._leading = True
                me = None
            elif inline:
                raise WouldBlock  # it would wait for the running group
            else:
                me = _Write(fn, durable)
                self._waiting.append(me)
        if me is None:  # nobody writing: a group of one, led by this thread
            try:
                result: T = self._transaction(local, fn, durable and self._full)
                self.commits += 1
                return result
            finally:
                with self._group_lock:
                    self._pass_lead(())
        me.latch.acquire()
        if not me.lead:
            done: T = me.outcome()
            return done
        with self._group_lock:
            group, self._waiting = self._waiting, []
        try:
            self._commit(group)
        finally:
            with self._group_lock:
                self._pass_lead(group, me)
        led: T = me.outcome()
        return led

    def _transaction(self, local: _ThreadState, fn: Callable[[SQLiteExec], T], sync: bool) -> T:
        """`fn` in a write transaction on this thread's connection: BEGIN IMMEDIATE;
        COMMIT, or ROLLBACK on any error (SQLite's own errors raised as StoreUnavailable).
        `sync`: the commit waits for the disk (the log fsynced; durability=full). A method,
        not a context manager: every send, receive and delete opens one."""
        ex = local.ex or self.exec()
        conn = ex.conn
        self.begin(conn, local)
        try:
            result = fn(ex)
            conn.execute("COMMIT")
        except BaseException as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise failure(f"SQLite store {self.path} failed", exc) from exc
            raise
        if sync:
            error = self.log.sync()  # committed; answered once on the disk
            if error is not None:
                raise error
        if local.no_wait:  # on an event loop: the log is copied back elsewhere
            self.checkpointer.committed()
        return result

    def _in_turn(self, fn: Callable[[SQLiteExec], T], durable: bool, call: Inline) -> T:
        """Run a short write on an event loop's thread in the transaction of the loop's turn
        (opened here by the first), in a savepoint of its own once another has run there;
        its caller awaits the turn's commit."""
        local = self._local.s
        turn = local.turn
        if turn is None:
            turn = self._open_turn()
        ex = self.exec()
        if turn.writes:
            result = self._savepoint(ex, fn)
        else:  # the first: where it fails, the whole transaction is undone
            try:
                result = fn(ex)
            except BaseException as exc:
                self._close_turn(turn, commit=False)
                if isinstance(exc, sqlite3.Error):
                    raise failure(f"SQLite store {self.path} failed", exc) from exc
                raise
        turn.writes += 1
        turn.durable = turn.durable or durable
        call.durable = turn.done
        return result

    def _open_turn(self) -> _Turn:
        """BEGIN IMMEDIATE on the loop's connection, for the writes of this turn of the loop
        (`WouldBlock` where another thread or process writes); committed at its next."""
        loop = running_loop_or_block()  # the loop to await the commit on
        with self._group_lock:
            if self._leading or self._gathered.busy():
                raise WouldBlock  # it would wait for the running group
            self._leading = True  # other threads' writes wait for this turn's commit
        try:
            conn = self.exec().conn
            self.begin(conn, self._local.s)
        except BaseException:
            with self._group_lock:
                self._pass_lead(())
            raise
        turn = self._local.s.turn = _Turn(conn, loop)
        self._turns.add(turn)
        loop.call_soon(self._end_turn, turn)
        return turn

    def _end_turn(self, turn: _Turn) -> None:
        """On the loop's thread: commit a turn's transaction (if still open) and settle
        what its writes wait for."""
        if turn not in self._turns:
            return
        error = self._close_turn(turn, commit=True)
        done = turn.done
        if error is not None:
            done.set_exception(error)
            return
        run_each(turn.later)
        if turn.durable and self._full:
            self._syncer.after(done)
        else:
            done.set_result(None)
        checkpointer = self.checkpointer
        if checkpointer.restart == "asked" and self._local.s.no_wait:
            checkpointer.restart_on(turn.conn)

    def _close_turn(self, turn: _Turn, *, commit: bool) -> StoreUnavailable | None:
        """Commit the turn's transaction (what failed, if it did), or roll it back (its
        first write failed: nobody waits for it), and let the next writer lead."""
        self._turns.discard(turn)
        if self._local.s.turn is turn:
            self._local.s.turn = None
        conn = turn.conn
        error: StoreUnavailable | None = None
        try:
            if commit:
                conn.execute("COMMIT")
        except sqlite3.Error as exc:
            error = failure(f"SQLite store {self.path} failed", exc)
        finally:
            try:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            finally:
                with self._group_lock:
                    self._pass_lead(())
        if commit and error is None:
            self.commits += 1
            self.checkpointer.committed()
        else:
            run_each(turn.undone)
        return error

    def _pass_lead(self, group: Sequence[_Write], leader: _Write | None = None) -> None:
        """After a group's commit, under `_group_lock`: the first write waiting leads the
        next group (or no one leads); the group's other writes go on with their outcomes."""
        if self._waiting:
            following = self._waiting[0]
            following.lead = True
            following.latch.release()
        else:
            self._leading = False
        for w in group:
            if w is not leader:
                w.latch.release()

    def _commit(self, group: list[_Write]) -> None:
        """Run a group's writes in one transaction, each in a savepoint of its own when
        there are several, and set each one's result or error."""
        # at durability=full a commit that need not be durable is made durable by the next
        # durable commit (or checkpoint): a power cut before that can undo it
        sync = self._full and any(w.durable for w in group)
        results: list[tuple[_Write, Any]] = []

        def run(ex: SQLiteExec) -> None:
            if len(group) == 1:
                results.append((group[0], group[0].fn(ex)))
            else:
                for w in group:
                    try:
                        results.append((w, self._savepoint(ex, w.fn)))
                    except Exception as exc:
                        w.error = exc

        try:
            self._transaction(self._local.s, run, sync)
        except BaseException as exc:  # nothing of the group was committed
            for w in group:
                w.error = exc
            return
        self.commits += 1
        for w, result in results:
            w.result = result

    def begin(self, conn: sqlite3.Connection, local: _ThreadState) -> None:
        """BEGIN IMMEDIATE. Where another connection holds the write lock: `FINE_AFTER` in
        SQLite's busy handler, then tries in short steps, then after `TURN_AFTER` the
        file's turn (sqlite_turnstile.py), until the store's busy timeout has passed in
        all; then the call fails with StoreUnavailable. While another writer has the turn,
        a write holds back before it asks. Inline (on an event loop's thread) a busy lock,
        or the turn taken, raises `WouldBlock` at once.

        Short steps from the first try (50 µs to 2 ms) were measured against SQLite's
        handler alone: 2 and 4 processes sending on one file moved a quarter fewer messages
        at a worse p99, the lock changing hands after every transaction. After 5 ms in the
        handler they move as many (docs/benchmarks.md, "Processes sharing one SQLite file").
        """
        turnstile = self._turnstile
        if local.inline:
            if turnstile is not None and turnstile.flag[0] and turnstile.held_up():
                raise WouldBlock
            if not local.no_wait:  # kept while the thread runs inline
                conn.execute("PRAGMA busy_timeout = 0")
                conn.execute("PRAGMA wal_autocheckpoint = 0")  # see sqlite_checkpoints.py
                local.no_wait = True
            try:
                conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if _busy(exc):
                    raise WouldBlock from exc
                raise failure(f"SQLite store {self.path} is unavailable", exc) from exc
        if local.no_wait:
            conn.execute(f"PRAGMA busy_timeout = {self._wait_ms}")
            conn.execute(f"PRAGMA wal_autocheckpoint = {AUTOCHECKPOINT}")
            local.no_wait = False
        started = time.monotonic()
        if turnstile is not None and turnstile.flag[0] and turnstile.held_up():
            local.waited = True
            if not self._wait_for_lock(conn, turnstile, started):
                raise self._locked(started)
            return
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if not _busy(exc):
                raise failure(f"SQLite store {self.path} is unavailable", exc) from exc
            local.waited = True
            if turnstile is not None and self._wait_for_lock(conn, turnstile, started):
                return
            raise self._locked(started) from exc
        # microseconds where the lock is free; SQLite's busy handler sleeps 1 ms and more
        local.waited = time.monotonic() - started > LOCK_WAITED

    def _locked(self, started: float) -> StoreUnavailable:
        return StoreUnavailable(
            f"SQLite store {self.path} stayed locked for {time.monotonic() - started:.1f} s"
            f" (busy_timeout={self._busy_ms / 1000:g}): another connection holds its write"
            " lock (a long transaction, or a process stopped in one); retry later, or"
            " raise busy_timeout in the store's URL"
        )

    def _wait_for_lock(
        self, conn: sqlite3.Connection, turnstile: Turnstile, started: float
    ) -> bool:
        """BEGIN IMMEDIATE for a write that met the lock taken (or the turn another writer
        has: it holds back first): tried in short steps until `TURN_AFTER` has passed since
        `started`, then with the file's turn; False where the busy timeout passed first.
        Short steps rather than SQLite's handler, whose sleeps grow to 20 ms and more: the
        lock is free for microseconds between another process's transactions, and the
        writers that held back for a turn all ask at once when it ends."""
        until = started + self._busy_ms / 1000
        if turnstile.flag[0]:
            turnstile.give_way(until)
        if self._poll_begin(conn, min(started + TURN_AFTER, until), turnstile):
            return True
        if self._begin_in_turn(conn, turnstile, started):
            return True
        # the turn could not be had for `HOLD_BACK` (its holder stopped): on without it
        return self._poll_begin(conn, until, turnstile)

    def _begin_in_turn(
        self, conn: sqlite3.Connection, turnstile: Turnstile, started: float
    ) -> bool:
        """BEGIN IMMEDIATE with the file's turn held (writes of other processes and threads
        hold back meanwhile), waiting for the rest of the busy timeout at most; False where
        the turn or the lock could not be had in that time."""
        until = started + self._busy_ms / 1000
        if not turnstile.take(until):
            return False
        try:
            return self._poll_begin(conn, until, None)
        finally:
            turnstile.leave()

    def _poll_begin(
        self, conn: sqlite3.Connection, until: float, turnstile: Turnstile | None
    ) -> bool:
        """BEGIN IMMEDIATE tried every 0.1 ms, growing to 0.5 ms, until `until`; False where
        the lock stayed taken. With `turnstile` (not held by this writer), it holds back
        again while another writer has the turn."""
        conn.execute("PRAGMA busy_timeout = 0")
        try:
            for _ in short_tries(until, first=0.0001):
                if turnstile is not None and turnstile.flag[0]:
                    turnstile.give_way(until)
                try:
                    conn.execute("BEGIN IMMEDIATE")
                    return True
                except sqlite3.OperationalError as exc:
                    if not _busy(exc):
                        raise failure(f"SQLite store {self.path} is unavailable", exc) from exc
            return False
        finally:
            conn.execute(f"PRAGMA busy_timeout = {self._wait_ms}")

    def announce(self, key: str, queue: str) -> None:
        self._wakes.announce(queue)

    def _listen(self, key: str) -> bool:
        return self._wakes.listen(functools.partial(HUB.notify, key))

    async def wait_async(
        self, key: str, queue: str, since: int, timeout: float, interval: float
    ) -> None:
        self._listen(key)
        await HUB.wait_async(key, queue, since, timeout, interval)

    def wait(self, key: str, queue: str, since: int, timeout: float) -> None:
        """Wake on a send in this process or another (through the wake directory), or on
        any commit by another (PRAGMA data_version, looked at every 20 ms where the wake
        directory cannot be used, else every 200 ms)."""
        every = 0.2 if self._listen(key) else 0.02
        conn = self.exec().conn
        version = conn.execute("PRAGMA data_version").fetchone()
        remaining = timeout
        while remaining > 0:
            step = min(remaining, every)
            if HUB.wait(key, queue, since, step):
                return
            if conn.execute("PRAGMA data_version").fetchone() != version:
                return
            remaining -= step

    def last_write(self, fn: Callable[[SQLiteExec], object]) -> None:
        """One attempt, on a connection of its own (this thread's may be in an event loop's
        turn, and the process may be ending), nothing said if it fails: the counts it held
        are what is lost. A database in memory goes with the process: nothing to write."""
        if self.path == ":memory:" or not os.path.exists(self.path):
            return
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, timeout=self._busy_ms / 1000)
        except sqlite3.Error:
            return
        try:
            conn.execute("BEGIN IMMEDIATE")
            fn(SQLiteExec(conn))
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            log.debug("the last counts of %s were not written: %s", self.path, exc)
        finally:
            conn.close()

    def close(self) -> None:
        for turn in list(self._turns):  # the loop that would have committed it has stopped
            error = self._close_turn(turn, commit=True)
            if error is None and turn.durable and self._full:
                error = self.log.sync()
            settle_all([(turn.done, None, error)])
        self._gathered.close()
        self._gathered = _Gathered(self)
        self._syncer.close()
        self._syncer = Syncer(self.wal)
        self.checkpointer.close()
        self.checkpointer = Checkpointer(self)
        self._wakes.close()
        if self._turnstile is not None:
            self._turnstile.close()
            self._turnstile = None
            self._turnstile_looked = False
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
        self.log.close()
        self._local = _PerThread()


def run_each(calls: Sequence[Callable[[], object]]) -> None:
    """Call each of `calls` (held for after a commit, or for its failure): one that raises
    does not keep the others from running."""
    for fn in calls:
        with contextlib.suppress(Exception):
            fn()


def _busy(exc: sqlite3.OperationalError) -> bool:
    return "locked" in str(exc) or "busy" in str(exc)
