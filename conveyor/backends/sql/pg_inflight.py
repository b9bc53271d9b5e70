"""PostgreSQL: a deep queue (`inflight.py`) gets two partial indexes of its own.

They are built `CONCURRENTLY` on a connection of their own in a background thread, so no
writer waits, by one process at a time (an advisory lock: processes find deep queues each
for itself): the queue's messages never received, in delivery order, and the others by the
time they become visible (then delivery order). Once both are valid, its claims and walks
(queues with a dead-letter policy) read the first ready rows of each.

The indexes go when the queue is deleted, and when it is shallow again: while any queue has
them, PostgreSQL counts their columns as indexed, so a receive's rewrite of a row of any
queue is no longer a HOT update (docs/stores.md). Every `recheck_every` seconds a process
claiming from a deep queue looks again: with fewer than a fifth of `rows` messages in flight
or delayed, it drops them (in the background, without blocking writers); where another
process dropped them, it claims as from any queue again. A queue that goes deep again gets
them again, as the first time.
"""

from __future__ import annotations

import logging
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any

import psycopg

from .connections import CursorExec
from .inflight import LOOK_EVERY, HeadWatch
from .rows import Row
from .server_statements import (
    POSTGRES_DROP_HELD_INDEXES,
    POSTGRES_HELD_INDEXES,
    POSTGRES_INDEXES_EXIST,
    POSTGRES_LOCK_HELD_INDEXES,
    POSTGRES_STILL_DEEP,
    POSTGRES_VALID_INDEXES,
)
from .statement import Compiler, execute

log = logging.getLogger("conveyor.store")

RECHECK_EVERY = 30.0  # seconds between looks at whether a deep queue still is, per process
# seconds a plain claim takes before the store looks at the queue's head: with generic plans
# a claim stepping over 10,000 messages in flight takes about 1.5 ms here (and 0.6 ms over
# 1,000), so the 5 ms of `inflight.CHECK_AFTER` never found such a queue deep
CHECK_AFTER = 0.001
# seconds a claim from a deep queue takes before the store looks at once whether its indexes
# are still there (with them, 1 ms or less; without, a read of every held row)
SLOW_DEEP_CLAIM = 0.005


class HeldIndexes(HeadWatch):
    """Which queues have their in-flight indexes (`deep`: once both are valid), and
    building them; with `rows` 0, every queue is indexed as it is made."""

    def __init__(
        self,
        conninfo: str,
        prefix: str,
        configure: Callable[[psycopg.Connection[Any]], None],
        sql: Compiler,
    ) -> None:
        """`configure`: gives a new connection the store's session settings."""
        super().__init__(prefix, sql)
        self.conninfo = conninfo
        self.configure = configure
        self.check_after = CHECK_AFTER
        self.slow_after = SLOW_DEEP_CLAIM
        self.recheck_every = RECHECK_EVERY
        self._building: dict[int, threading.Thread] = {}
        self._dropping: list[threading.Thread] = []
        self._rechecked: dict[int, float] = {}  # deep queue: when this process last looked
        self._slow: dict[int, float] = {}  # and when a slow claim of it last made it look
        self._lock = threading.Lock()

    def names(self, qid: int) -> tuple[str, str]:
        return f"{self.prefix}m{int(qid)}_fresh", f"{self.prefix}m{int(qid)}_held"

    # -- finding out and building ---------------------------------------------------------

    def may_look(self, qid: int) -> bool:
        return qid not in self._building and super().may_look(qid)

    def deepen(self, qid: int) -> None:
        """Build the indexes of a queue found deep, in a thread; its claims use them once
        both are valid."""
        with self._lock:
            if qid in self._building:
                return
            thread = threading.Thread(
                target=self._build, args=(qid,), name="conveyor-pg-index", daemon=True
            )
            self._building[qid] = thread
            thread.start()

    def _locked(self, conn: psycopg.Connection[Any], qid: int) -> None:
        """Hold the lock of a queue's indexes for the session of `conn` (waiting for another
        process's build or drop of them): a second process that found the queue deep while
        the first built them would see them not yet valid, and take them for a build that
        died half-way. Tried again and again rather than waited for: a session waiting for
        the lock is in a statement, which a concurrent build waits for in turn."""
        key = self.lock_key(qid)
        delay = 0.01
        while True:
            got = execute(conn, self.sql(POSTGRES_LOCK_HELD_INDEXES), key).fetchone()
            if got is not None and got[0]:
                return
            time.sleep(delay)
            delay = min(delay * 2, 0.5)

    def lock_key(self, qid: int) -> dict[str, int]:
        """The advisory lock of a queue's indexes: two int4s, this store's and the queue's."""
        return {"space": zlib.crc32(f"held indexes {self.prefix}".encode()) - 2**31, "qid": qid}

    def _build(self, qid: int) -> None:
        fresh, held = self.names(qid)
        try:
            with psycopg.connect(self.conninfo, autocommit=True) as conn:
                self.configure(conn)
                self._locked(conn, qid)
                for statement in POSTGRES_HELD_INDEXES:
                    conn.execute(self.sql(statement, qid))
                valid = execute(
                    conn, self.sql(POSTGRES_VALID_INDEXES), {"fresh": fresh, "held": held}
                ).fetchone()
                if valid is not None and valid[0] == 2:
                    self._rechecked[qid] = time.monotonic()
                    self.deep.add(qid)
                else:  # an earlier build died half-way: start afresh next time
                    self._drop_indexes(conn, qid)
        except psycopg.Error as exc:
            log.warning("could not index the messages in flight of queue %s: %s", qid, exc)
        finally:
            with self._lock:
                self._building.pop(qid, None)

    def join(self) -> None:
        """Wait for the builds and drops under way."""
        with self._lock:
            threads = [*self._building.values(), *self._dropping]
        for thread in threads:
            thread.join()

    # -- finding out that a queue is shallow again -----------------------------------------

    def deep_rows(
        self, ex: CursorExec, qid: int, now: float, run: Callable[[], list[Row]]
    ) -> list[Row]:
        """The rows of a deep queue's claim (or walk page) `run`, timed for `recheck`."""
        started = time.perf_counter()
        rows = run()
        self.recheck(ex, qid, now, time.perf_counter() - started)
        return rows

    def recheck(self, ex: CursorExec, qid: int, now: float, seconds: float) -> None:
        """After a deep queue's claim (that took `seconds`): at most every `recheck_every`
        seconds, whether its indexes are still there (another process may have dropped them)
        and whether it is still deep; where it is not, drop them. A slow claim (`slow_after`)
        looks at once, then at most once a second: without the indexes, a claim as from a
        deep queue reads every held row of the queue."""
        if not self.rows:  # every queue indexed as it is made
            return
        started = time.monotonic()
        if seconds >= self.slow_after and started >= self._slow.get(qid, -1e18) + LOOK_EVERY:
            self._slow[qid] = started
        elif started < self._rechecked.get(qid, -1e18) + self.recheck_every:
            return
        self._rechecked[qid] = started
        fresh, held = self.names(qid)
        shallow = max(1, self.rows // 5)
        found = ex.one(
            self.sql(POSTGRES_STILL_DEEP, qid),
            {"fresh": fresh, "held": held, "now": now, "rows": shallow},
        )
        if found is None:
            return
        valid, waiting = int(found[0]), int(found[1])
        if valid < 2:  # dropped elsewhere (or being rebuilt): claim as from any queue
            self.deep.discard(qid)
        elif waiting < shallow:
            log.info(
                "queue %s has %d messages in flight or delayed: dropping its indexes of them",
                qid,
                waiting,
            )
            self.deep.discard(qid)
            self._drop_later(qid, "shallow")

    # -- dropping -------------------------------------------------------------------------

    def drop(self, ex: CursorExec, qid: int) -> None:
        """After a queue's messages are deleted: drop its indexes, if it had them, in the
        background (a plain DROP INDEX would lock the table for every queue)."""
        self.deep.discard(qid)
        self._rechecked.pop(qid, None)
        self._slow.pop(qid, None)
        fresh, held = self.names(qid)
        found = ex.one(self.sql(POSTGRES_INDEXES_EXIST), {"fresh": fresh, "held": held})
        if found is None or found == (None, None):
            return
        self._drop_later(qid, "deleted")

    def _drop_later(self, qid: int, why: str) -> None:
        def run() -> None:
            try:
                with psycopg.connect(self.conninfo, autocommit=True) as conn:
                    self._locked(conn, qid)
                    self._drop_indexes(conn, qid)
            except psycopg.Error as exc:
                log.warning("could not drop the indexes of %s queue %s: %s", why, qid, exc)

        thread = threading.Thread(target=run, name="conveyor-pg-index", daemon=True)
        with self._lock:
            self._dropping = [t for t in self._dropping if t.is_alive()] + [thread]
        thread.start()

    def _drop_indexes(self, conn: psycopg.Connection[Any], qid: int) -> None:
        for statement in POSTGRES_DROP_HELD_INDEXES:
            conn.execute(self.sql(statement, qid))
