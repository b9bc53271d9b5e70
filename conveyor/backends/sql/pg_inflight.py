"""PostgreSQL: a queue whose head fills with messages in flight gets indexes of its own.

A claim walks the order index `(queue_id, nprio, seq)` from the queue's head and steps over
every message in flight (or delayed) there, so with thousands of them each receive costs
more. When a claim is slow (`check_after` seconds) the store counts, up to `rows`, what
lies ahead of the first message it took (or, having taken none, in the whole queue); past
`rows` it builds two partial indexes for that queue alone, `CONCURRENTLY` on a connection
of its own in a background thread, so no writer waits: the messages never received, in
delivery order, and the others by the time they become visible (then delivery order).
Once both are valid, its claims read the first ready rows of each and take the earliest
in delivery order, and a walk (queues with a dead-letter policy) pages through the same
two. Every process finds out for itself, by the same count; the indexes go when the queue
is deleted.
"""

from __future__ import annotations

import logging
import threading
import time

import psycopg

from .connections import CursorExec

log = logging.getLogger("conveyor.store")

CHECK_AFTER = 0.005  # seconds a claim takes before the store looks at the queue's head
ROWS = 5_000  # messages ahead of the first ready one worth two indexes
LOOK_EVERY = 1.0  # seconds between looks at one queue's head

# a row never received and not delayed is "fresh": it is ready (retention and deadline
# aside); any other row is "held" and ready once its visible_at has passed
FRESH = "receive_count = 0 AND visible_at <= sent_at"
HELD = "(receive_count > 0 OR visible_at > sent_at)"
READY = "visible_at <= %s AND sent_at >= %s AND (deadline IS NULL OR deadline > %s)"


class HeldIndexes:
    """Which queues have their in-flight indexes, and building them."""

    def __init__(self, conninfo: str, prefix: str, options: str) -> None:
        self.conninfo = conninfo
        self.prefix = prefix
        self.options = options
        self.check_after = CHECK_AFTER
        self.rows = ROWS  # 0: every queue is indexed as it is made (`statements`)
        self.indexed: set[int] = set()  # queues whose indexes are valid
        self._building: dict[int, threading.Thread] = {}
        self._dropping: list[threading.Thread] = []
        self._looked: dict[int, float] = {}  # queue: when a slow claim last looked
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
        """The claim of an indexed queue; parameters: (now, horizon, now, limit) twice,
        limit, then visible_at, now, token."""
        return (
            f"{self._candidates(qid, READY, True)} UPDATE {self.prefix}messages m"
            f" SET {set_claimed} FROM c WHERE m.seq = c.seq RETURNING {columns}"
        )

    def walk_sql(self, qid: int, lock: bool) -> str:
        """A page of the visible rows of an indexed queue after a position, in delivery
        order; parameters: (now, nprio, seq, page) twice, then page."""
        return (
            f"{self._candidates(qid, 'visible_at <= %s AND (nprio, seq) > (%s, %s)', lock)}"
            " SELECT seq, -nprio, group_id, visible_at, receive_count, deadline, sent_at"
            f" FROM {self.prefix}messages WHERE seq IN (SELECT seq FROM c) ORDER BY nprio, seq"
        )

    # -- finding out and building ---------------------------------------------------------

    def look(self, ex: CursorExec, qid: int, seconds: float, first: tuple[int, int] | None) -> None:
        """After a plain claim (or walk page) that took `seconds` and found its first row
        at `first` (nprio, seq; None: it found none): build the indexes if many rows lie
        ahead of it."""
        if seconds < self.check_after or qid in self.indexed or qid in self._building:
            return
        now = time.monotonic()
        if now < self._looked.get(qid, -1e18) + LOOK_EVERY and self.check_after:
            return  # slow claims under load look at most once a second a queue
        self._looked[qid] = now
        ahead = "" if first is None else f" AND (nprio, seq) < ({first[0]}, {first[1]})"
        found = ex.one(
            f"SELECT count(*) FROM (SELECT 1 FROM {self.prefix}messages WHERE queue_id = %s"
            f"{ahead} LIMIT %s) a",
            (qid, self.rows),
        )
        if found is not None and int(found[0]) >= self.rows:
            self.build(qid)

    def build(self, qid: int, *, wait: bool = False) -> None:
        """Build a queue's indexes in a thread (`wait`: and wait for it)."""
        with self._lock:
            thread = self._building.get(qid)
            if thread is None:
                thread = threading.Thread(
                    target=self._build, args=(qid,), name="conveyor-pg-index", daemon=True
                )
                self._building[qid] = thread
                thread.start()
        if wait:
            thread.join()

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
                    self.indexed.add(qid)
                else:  # an earlier build died half-way: start afresh next time
                    for name in (fresh, held):
                        conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
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
        self.indexed.discard(qid)
        fresh, held = self.names(qid)
        found = ex.one("SELECT to_regclass(%s), to_regclass(%s)", (fresh, held))
        if found is None or found == (None, None):
            return

        def run() -> None:
            try:
                with psycopg.connect(self.conninfo, autocommit=True) as conn:
                    for name in (fresh, held):
                        conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
            except psycopg.Error as exc:
                log.warning("could not drop the indexes of deleted queue %s: %s", qid, exc)

        thread = threading.Thread(target=run, name="conveyor-pg-index", daemon=True)
        with self._lock:
            self._dropping = [t for t in self._dropping if t.is_alive()] + [thread]
        thread.start()
