"""PostgreSQL: a deep queue (`inflight.py`) gets two partial indexes of its own.

They are built `CONCURRENTLY` on a connection of their own in a background thread, so no
writer waits: the queue's messages never received, in delivery order, and the others by the
time they become visible (then delivery order). Once both are valid, its claims and walks
(queues with a dead-letter policy) read the first ready rows of each; the indexes go when
the queue is deleted.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import psycopg

from .connections import CursorExec
from .inflight import HeadWatch
from .statement import Compiler
from .statements import (
    POSTGRES_DROP_HELD_INDEXES,
    POSTGRES_HELD_INDEXES,
    POSTGRES_INDEXES_EXIST,
    POSTGRES_VALID_INDEXES,
)

log = logging.getLogger("conveyor.store")


class HeldIndexes(HeadWatch):
    """Which queues have their in-flight indexes (`deep`: once both are valid), and
    building them; with `rows` 0, every queue is indexed as it is made."""

    def __init__(self, conninfo: str, prefix: str, options: str, sql: Compiler) -> None:
        super().__init__(prefix, sql)
        self.conninfo = conninfo
        self.options = options
        self._building: dict[int, threading.Thread] = {}
        self._dropping: list[threading.Thread] = []
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

    def _build(self, qid: int) -> None:
        fresh, held = self.names(qid)
        try:
            with psycopg.connect(self.conninfo, autocommit=True, options=self.options) as conn:
                for statement in POSTGRES_HELD_INDEXES:
                    conn.execute(self.sql(statement, qid))
                valid = conn.execute(
                    self.sql(POSTGRES_VALID_INDEXES), {"fresh": fresh, "held": held}
                ).fetchone()
                if valid is not None and valid[0] == 2:
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

    def drop(self, ex: CursorExec, qid: int) -> None:
        """After a queue's messages are deleted: drop its indexes, if it had them, in the
        background (a plain DROP INDEX would lock the table for every queue)."""
        self.deep.discard(qid)
        fresh, held = self.names(qid)
        found = ex.one(self.sql(POSTGRES_INDEXES_EXIST), {"fresh": fresh, "held": held})
        if found is None or found == (None, None):
            return

        def run() -> None:
            try:
                with psycopg.connect(self.conninfo, autocommit=True) as conn:
                    self._drop_indexes(conn, qid)
            except psycopg.Error as exc:
                log.warning("could not drop the indexes of deleted queue %s: %s", qid, exc)

        thread = threading.Thread(target=run, name="conveyor-pg-index", daemon=True)
        with self._lock:
            self._dropping = [t for t in self._dropping if t.is_alive()] + [thread]
        thread.start()

    def _drop_indexes(self, conn: psycopg.Connection[Any], qid: int) -> None:
        for statement in POSTGRES_DROP_HELD_INDEXES:
            conn.execute(self.sql(statement, qid))
