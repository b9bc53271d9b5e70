"""How the commits a SQLite store makes on an event loop's thread reach the disk, and the
daemon threads of a store (`Worker`) that serve callers on event loops.

At durability=full a commit on an event loop is made without SQLite's fsync, as at
synchronous=NORMAL; the caller awaits a future resolved once the write-ahead log has been
fsynced after it (with the log fsynced, the commit is as durable as at FULL). The fsync is
made by a process of the store's (`FsyncProcess`, the program in fsyncd.py) that the loop
asks through a pipe and whose answers it reads as it reads its sockets: a thread of the
server's process would have to take Python's GIL back from the busy loop for every fsync
(two context switches and a dozen futex calls each time, which cost a send a third more
CPU than at durability=normal). Where no process can be started (a frozen program; the
system refuses) a thread does it (`SyncThread`).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from ...exceptions import StoreUnavailable
from ...notify import running_loop
from . import fsyncd

if TYPE_CHECKING:
    import asyncio

    # a future, its result or error
    Outcome = tuple[asyncio.Future[Any], Any, BaseException | None]

log = logging.getLogger("conveyor.sqlite")


class Worker:
    """A daemon thread of the store's, started when first handed work (`_hand`), that
    serves callers on event loops and settles their futures (`settle_all`)."""

    name = ""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None
        self._closed = False

    def _hand(self) -> None:
        """After work was added under `_lock`: start the thread, or wake it."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()
        self._wake.notify()

    def _await_work(self, pending: Callable[[], bool]) -> bool:
        """Wait until `pending()` or closed; False once closed with nothing pending."""
        with self._lock:
            while not pending() and not self._closed:
                self._wake.wait()
            return pending()

    def _run(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join(10)


class SyncThread(Worker):
    """Makes commits durable for callers on event loops: fsyncs the write-ahead log file
    from a thread of its own and resolves the futures of every commit made before the
    fsync began (commits on the event loop are made without SQLite's fsync, as at
    synchronous=NORMAL; with the log fsynced after them they are as durable as at FULL).

    The short writes of a loop's turn share a commit (`_Turn`) and so one future here: the
    thread takes Python's GIL back from the loop (two context switches and a dozen futex
    calls) once for them rather than once for each."""

    name = "conveyor-sqlite-sync"

    def __init__(self, wal: str) -> None:
        super().__init__()
        self.wal = wal
        self._waiting: list[asyncio.Future[None]] = []
        self.fsyncs = 0

    def after(self, future: asyncio.Future[None]) -> None:
        """Resolve `future` once what was committed so far is on disk."""
        with self._lock:
            self._waiting.append(future)
            self._hand()

    def _run(self) -> None:
        # The log stays open between fsyncs: every system call that gives up the GIL is a
        # hand-over with the busy loop (a dozen futex calls) when the thread takes it back.
        # The file cannot be replaced meanwhile: SQLite removes the log only when the last
        # connection to the database closes, and the loop's connection, whose commits this
        # thread makes durable, closes only in `SQLiteConnections.close`, after this thread.
        wal = LogFile(self.wal)
        try:
            while self._await_work(lambda: bool(self._waiting)):
                with self._lock:
                    group, self._waiting = self._waiting, []
                error = wal.sync()
                self.fsyncs += 1
                settle_all([(future, None, error) for future in group])
        finally:
            wal.close()


class LogFile:
    """A file (the write-ahead log) held open to be fsynced, by any thread. The first
    fsync after it is opened fsyncs its directory too, as SQLite does the first time it
    syncs a new log: a log made since the directory was last synced is then found after a
    power cut, with what was fsynced in it."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None
        self._lock = threading.Lock()
        self.syncs = 0

    def sync(self) -> StoreUnavailable | None:
        """fsync the file; what went wrong, if anything (then it is opened afresh for the
        next fsync)."""
        with self._lock:
            try:
                if self._fd is None:
                    self._fd = os.open(self.path, os.O_RDONLY)
                    fsyncd.sync_data(self._fd)
                    fsyncd.fsync_directory(self.path)
                else:
                    fsyncd.sync_data(self._fd)
            except OSError as exc:
                self._close()
                return StoreUnavailable(f"SQLite store: cannot fsync {self.path}: {exc}")
            self.syncs += 1
        return None

    def close(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)


def fsync_file(path: str) -> StoreUnavailable | None:
    """fsync a file once (the write-ahead log); what went wrong, if anything."""
    once = LogFile(path)
    try:
        return once.sync()
    finally:
        once.close()


def settle_all(outcomes: list[Outcome]) -> None:
    """Resolve futures from another thread: one wake-up of each event loop for all its own."""
    by_loop: dict[asyncio.AbstractEventLoop, list[Outcome]] = {}
    for outcome in outcomes:
        by_loop.setdefault(outcome[0].get_loop(), []).append(outcome)
    for loop, mine in by_loop.items():
        if not loop.is_closed():
            loop.call_soon_threadsafe(_resolve, mine)


def _resolve(outcomes: list[Outcome]) -> None:
    for future, result, error in outcomes:
        if future.done():
            continue
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)


class FsyncProcess:
    """The store's fsync helper (fsyncd.py): asked a byte for every commit that awaits the
    disk (`after`); its answers are read on an event loop (`add_reader`), in order, one byte
    a request. Thread-safe: loops on several threads may ask; the answers are read on the
    last loop that asked after the previous one closed, and futures of other loops are
    resolved on their own."""

    def __init__(self, wal: str) -> None:
        self.wal = wal
        self.fsyncs = 0
        self._lock = threading.Lock()  # a request and its future go in together
        self._waiting: collections.deque[asyncio.Future[None]] = collections.deque()
        self._owner = os.getpid()  # a process forked from the owner has none of its own
        self._loop: asyncio.AbstractEventLoop | None = None  # where the answers are read
        import subprocess  # (its import is paid where a server starts the helper)

        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-S", str(Path(fsyncd.__file__)), wal],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,
        )
        asks, answers = self.proc.stdin, self.proc.stdout
        assert asks is not None and answers is not None  # both asked for as pipes
        self._asks: IO[bytes] = asks
        self._answers: IO[bytes] = answers
        os.set_blocking(self._asks.fileno(), False)  # never a wait on the loop
        self.alive = True

    def after(self, future: asyncio.Future[None]) -> bool:
        """Ask for an fsync that resolves `future` (on its event loop's thread); False where
        the helper is gone (the caller asks elsewhere)."""
        loop = future.get_loop()
        with self._lock:
            if not self.alive or os.getpid() != self._owner:
                return False
            try:
                os.write(self._asks.fileno(), fsyncd.ASK)
            except OSError:  # it ended (a broken pipe), or has 64 KiB of requests unread
                self._gone(StoreUnavailable(f"SQLite store: the fsync helper of {self.wal} ended"))
                return False
            self._waiting.append(future)
            if self._loop is None or self._loop.is_closed():
                self._loop = loop
                loop.add_reader(self._answers.fileno(), self._answered)
        return True

    def _answered(self) -> None:
        try:
            answers = os.read(self._answers.fileno(), 65536)
        except BlockingIOError:
            return
        except OSError:
            answers = b""
        if not answers:
            with self._lock:
                self._gone(
                    StoreUnavailable(
                        f"SQLite store: the fsync helper of {self.wal} ended; what was"
                        " committed may not be on disk (send it again)"
                    )
                )
            return
        outcomes: list[Outcome] = []
        with self._lock:
            for answer in answers:
                future = self._waiting.popleft()
                if answer in (fsyncd.DONE, fsyncd.ALSO_DONE):
                    self.fsyncs += answer == fsyncd.DONE
                    outcomes.append((future, None, None))
                else:
                    error = StoreUnavailable(
                        f"SQLite store: cannot fsync {self.wal} (the reason is in the"
                        " server's standard error); what was committed may not be on disk"
                    )
                    outcomes.append((future, None, error))
        here = self._loop
        settle_all([o for o in outcomes if o[0].get_loop() is not here])
        _resolve([o for o in outcomes if o[0].get_loop() is here])

    def _gone(self, error: StoreUnavailable | None) -> None:
        """Under `_lock`: the helper ended or is ended; what waits for it fails with
        `error` (or succeeds: None)."""
        self.alive = False
        loop, self._loop = self._loop, None
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(Exception):
                if loop is running_loop():
                    loop.remove_reader(self._answers.fileno())
                else:
                    loop.call_soon_threadsafe(loop.remove_reader, self._answers.fileno())
        settle_all([(future, None, error) for future in self._waiting])
        self._waiting.clear()

    def close(self) -> None:
        """End the helper and reap it; what still waits for it is fsynced here."""
        if os.getpid() != self._owner:  # a forked copy: the helper is the owner's
            for pipe in (self._asks, self._answers):
                with contextlib.suppress(OSError):
                    pipe.close()
            return
        with self._lock:
            if self.alive:
                self._gone(fsync_file(self.wal) if self._waiting else None)
        with contextlib.suppress(OSError):
            self._asks.close()
        import subprocess

        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        with contextlib.suppress(OSError):
            self._answers.close()


class Syncer:
    """Resolves futures once the commits made before they were handed over are on disk:
    by the store's fsync helper (`FsyncProcess`), started at the first, or by a thread
    (`SyncThread`) where it cannot be started."""

    def __init__(self, wal: str) -> None:
        self.wal = wal
        self._thread = SyncThread(wal)
        self._process: FsyncProcess | None = None
        self._ended_fsyncs = 0  # of helpers that ended
        # a frozen program's executable is the program itself, not a Python to run a file
        self._spawn = bool(sys.executable) and not getattr(sys, "frozen", False)

    @property
    def fsyncs(self) -> int:
        process = self._process
        return self._thread.fsyncs + self._ended_fsyncs + (process.fsyncs if process else 0)

    def after(self, future: asyncio.Future[None]) -> None:
        """Resolve `future` once what was committed so far is on disk."""
        process = self._process
        if process is not None and process.after(future):
            return
        if self._spawn:
            if process is not None:  # it ended: a new one, once
                self._retire(process)
            try:
                self._process = process = FsyncProcess(self.wal)
            except OSError as exc:
                log.warning(
                    "SQLite store %s: cannot start the fsync helper (%s); a thread fsyncs",
                    self.wal,
                    exc,
                )
                self._spawn = False
            else:
                if process.after(future):
                    return
        self._thread.after(future)

    def _retire(self, process: FsyncProcess) -> None:
        self._ended_fsyncs += process.fsyncs
        self._process = None
        process.close()

    def close(self) -> None:
        if self._process is not None:
            self._retire(self._process)
        self._thread.close()
