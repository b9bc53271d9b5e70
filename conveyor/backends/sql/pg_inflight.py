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
from .inflight import FRESH, HELD, READY, HeadWatch

log = logging.getLogger("conveyor.store")


class HeldIndexes(HeadWatch):
    """Which queues have their in-flight indexes (`deep`: once both are valid), and
    building them; with `rows` 0, every queue is indexed as it is made (`statements`)."""

    def __init__(self, conninfo: str, prefix: str, options: str) -> None:
        super().__init__(prefix)
        self.conninfo = conninfo
        self.options = options
        self._building: dict[int, threading.Thread] = {}
        self._dropping: list[threading.Thread] = []
        self._lock = threading.Lock()

    def names(self, qid: int) -> tuple[str, str]:
        return f"{self.prefix}m{int(qid)}_fresh", f"{self.prefix}m{int(qid)}_held"

    # -- statements -----------------------------------------------------------------------

    def _candidates(self, qid: int, where: str, lock: bool) -> str:
        """CTEs f and h: the first fresh rows in delivery order and the held ones visible
        first, `where` (with its parameters) added to both."""
        m, q = f"{self.prefix}messages", int(qid)
        locked = " FOR UPDATE SKIP LOCKED" if lock else ""
        return (
            f"WITH f AS (SELECT seq, nprio FROM {m} WHERE queue_id = {q} AND {FRESH} AND {where}"
            f" ORDER BY nprio, seq LIMIT %s{locked}), h AS (SELECT seq, nprio FROM {m}"
            f" WHERE queue_id = {q} AND {HELD} AND {where} ORDER BY visible_at, nprio, seq"
            f" LIMIT %s{locked}),"
            " c AS (SELECT seq FROM (SELECT * FROM f UNION ALL SELECT * FROM h) u"
            " ORDER BY nprio, seq LIMIT %s)"
        )

    def claim_sql(self, qid: int, set_claimed: str, columns: str) -> str:
        """The claim of an indexed queue; parameters: (now, horizon, expires, limit) twice,
        limit, then `claim_params`."""
        return (
            f"{self._candidates(qid, READY, True)} UPDATE {self.prefix}messages m"
            f" SET {set_claimed} FROM c WHERE m.seq = c.seq RETURNING {columns}"
        )

    def walk_sql(self, qid: int, after: str, lock: bool) -> str:
        """A page of the visible rows of an indexed queue after a position (the condition
        `after`), in delivery order; parameters: (now, after's, page) twice, then page."""
        return (
            f"{self._candidates(qid, f'visible_at <= %s AND {after}', lock)}"
            " SELECT seq, -nprio, group_id, visible_at, receive_count, deadline, sent_at"
            f" FROM {self.prefix}messages WHERE seq IN (SELECT seq FROM c) ORDER BY nprio, seq"
        )

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

    def statements(self, qid: int, *, concurrently: bool = True) -> list[str]:
        """The two indexes of a queue, `CONCURRENTLY` (outside a transaction) or not."""
        fresh, held = self.names(qid)
        m, q = f"{self.prefix}messages", int(qid)
        how = "CONCURRENTLY IF NOT EXISTS" if concurrently else "IF NOT EXISTS"
        return [
            f"CREATE INDEX {how} {fresh} ON {m} (nprio, seq) WHERE queue_id = {q} AND {FRESH}",
            f"CREATE INDEX {how} {held} ON {m} (visible_at, nprio, seq)"
            f" WHERE queue_id = {q} AND {HELD}",
        ]

    def _build(self, qid: int) -> None:
        fresh, held = self.names(qid)
        try:
            with psycopg.connect(self.conninfo, autocommit=True, options=self.options) as conn:
                for statement in self.statements(qid):
                    conn.execute(statement)
                valid = conn.execute(
                    "SELECT count(*) FROM pg_index WHERE indisvalid AND indexrelid IN"
                    " (to_regclass(%s), to_regclass(%s))",
                    (fresh, held),
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
        found = ex.one("SELECT to_regclass(%s), to_regclass(%s)", (fresh, held))
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
        for name in self.names(qid):
            conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
