"""Copying the write-ahead log of a SQLite store back into its database file, for the
commits made on event loops (`Checkpointer`), from a thread of its own."""

from __future__ import annotations

import logging
import sqlite3
import threading
from typing import TYPE_CHECKING

from ...exceptions import StoreUnavailable
from .sqlite_sync import Worker

if TYPE_CHECKING:
    from .sqlite_connections import SQLiteConnections

log = logging.getLogger("conveyor.sqlite")
AUTOCHECKPOINT = 1000  # SQLite's default: pages of log after which a commit checkpoints


class Checkpointer(Worker):
    """Copies the write-ahead log back into the database file for the commits made on
    event loops, from a thread of its own.

    SQLite checkpoints inside the COMMIT that takes the log past 1,000 pages: a copy of
    every page written since, with two fsyncs at durability=normal, on the thread that
    commits. On an event loop's thread that stalled every request it was serving and cost
    the loop a third to a half of what a receive or delete commit costs on average. The
    loop's connection therefore does not checkpoint (``wal_autocheckpoint = 0``); after
    `every` of its commits this thread runs a PASSIVE checkpoint, which does not block
    writers (`every` adapts so that a checkpoint finds about as many new pages as SQLite's
    own would: AUTOCHECKPOINT). A log that still grows past `LIMIT` pages (writes went on
    during every checkpoint, so the log never started again from its beginning) gets a
    RESTART checkpoint: the next write then starts the log anew. A RESTART holds the write
    lock while it copies what came during the PASSIVE one and waits for readers; made from
    this thread, it first waits for the lock in SQLite's busy handler (sleeps of 1, 2, 5,
    10 ... ms) against a loop that takes the lock every turn, and then holds back every
    write until it is done (tens of milliseconds under load). So it is asked of the loop,
    which tries it once between two of its turns, without waiting for anything
    (`restart_on`); this thread makes it where no turn came within WAIT_MS or the loop's
    try met another writer or a reader."""

    name = "conveyor-sqlite-checkpoint"
    EVERY = 256  # commits on event loops between the first checkpoints
    FEWEST, MOST = 16, 4096  # the range of `every`
    LIMIT = 4096  # pages of log (16 MiB at SQLite's default page size) before a RESTART
    WAIT_MS = 100  # how long a RESTART waits for the write lock and for readers

    def __init__(self, db: SQLiteConnections) -> None:
        super().__init__()
        self.db = db
        self._commits = 0  # since the last request for a checkpoint
        self.every = self.EVERY
        self._pages = 0  # in the log at the last checkpoint
        self._pending = False
        self._restart_at = self.LIMIT
        self.checkpoints = 0
        self.restarts = 0
        self.gave_up = 0  # RESTARTs that met a reader or writer for longer than WAIT_MS
        self.restarts_on_loop = 0  # of `restarts`, those the loop made
        # a RESTART asked of the loop: "asked", "taken" (the loop is making it), or what
        # came of it ("made", "busy"); None when none is asked
        self.restart: str | None = None
        self._restarted = threading.Condition(self._lock)

    def committed(self) -> None:
        """After a commit on an event loop's thread."""
        self._commits += 1
        if self._commits >= self.every:
            self._commits = 0
            with self._lock:
                self._pending = True
                self._hand()

    def _run(self) -> None:
        while self._await_work(lambda: self._pending):
            with self._lock:
                self._pending = False
            try:
                self._checkpoint(self.db.exec().conn)
            except (sqlite3.Error, StoreUnavailable):
                # the next commits ask again; meanwhile the log grows, as it does in SQLite
                # while a checkpoint cannot finish
                log.debug("SQLite store %s: checkpoint failed", self.db.path, exc_info=True)

    def _checkpoint(self, conn: sqlite3.Connection) -> None:
        """A PASSIVE checkpoint, then a RESTART where the log has grown past the limit: it
        copies what came during the first, holding writers back only for that. A reader
        that keeps an old snapshot for longer than WAIT_MS makes it give up (busy); it is
        tried again once the log has grown by another LIMIT pages."""
        if not self.checkpoints:
            conn.execute(f"PRAGMA busy_timeout = {self.WAIT_MS}")
        (_, pages, _) = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        self.checkpoints += 1
        # pages written since the last checkpoint (fewer counted where the log started anew)
        new = pages - self._pages if pages >= self._pages else pages
        self._pages = pages
        wanted = self.every * AUTOCHECKPOINT // max(new, 1)
        self.every = min(max((self.every + wanted) // 2, self.FEWEST), self.MOST)
        if pages < self._restart_at:
            return
        with self._lock:
            self.restart = "asked"
            self._restarted.wait_for(lambda: self.restart != "asked", self.WAIT_MS / 1000)
            # a RESTART the loop has taken ends without waiting for anything
            self._restarted.wait_for(lambda: self.restart != "taken")
            outcome, self.restart = self.restart, None
        if outcome != "made":  # no turn came, or the loop met a lock or a reader
            (busy, _, _) = conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()
            self._restart_made(busy=bool(busy), pages=pages)

    def restart_on(self, conn: sqlite3.Connection) -> None:
        """On the loop's thread, between two turns (no transaction open, the connection's
        busy timeout 0): the RESTART asked for, tried once; where it meets another writer
        or a reader, the checkpoint thread makes it, waiting as long as it may."""
        with self._lock:
            if self.restart != "asked":
                return
            self.restart = "taken"
        made = False
        try:
            (busy, _, _) = conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()
            made = not busy
        except sqlite3.Error:
            log.debug("SQLite store %s: checkpoint failed", self.db.path, exc_info=True)
        finally:  # the checkpoint thread waits for the outcome
            with self._lock:
                if made:
                    self._restart_made(busy=False, pages=0)
                    self.restarts_on_loop += 1
                self.restart = "made" if made else "busy"
                self._restarted.notify_all()

    def _restart_made(self, *, busy: bool, pages: int) -> None:
        self.restarts += 1
        self.gave_up += busy
        if busy:
            self._restart_at = pages + self.LIMIT
        else:
            self._restart_at, self._pages = self.LIMIT, 0  # the next write starts the log
