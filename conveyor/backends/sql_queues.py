"""The SQL stores' queue operations: creating, changing, listing, purging and deleting
queues, their statistics, and the sweep of expired messages."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..exceptions import QueueDoesNotExist, QueueExists
from ..models import QueueAttributes, QueueInfo, QueueStats
from .sql_conn import Cursor, SQLConnections, in_list
from .sql_pipeline import _Exec
from .sql_schema import archive_insert

if TYPE_CHECKING:
    from .pipeline import Exec

# how many rows of a queue's head a periodic sweep looks at for messages past retention
SWEEP_HEAD = 1000


class SQLQueues(SQLConnections):
    """Mixed into `SQLBackend`; uses its transactions and lookups."""

    if TYPE_CHECKING:

        def _pl_forget(self, ex: Exec, qid: int) -> None: ...

    def _info(self, cur: Cursor, name: str) -> QueueInfo:
        cur.execute(
            f"SELECT name, attrs, created_at, updated_at FROM {self.prefix}queues WHERE name = %s",
            (name,),
        )
        row = cur.fetchone()
        if row is None:
            raise QueueDoesNotExist(f"queue {name!r} does not exist: create it first")
        return QueueInfo(
            name=row[0],
            attributes=QueueAttributes.from_json(row[1]),
            created_at=row[2],
            updated_at=row[3],
        )

    def create_queue(self, name: str, attributes: QueueAttributes) -> tuple[QueueInfo, bool]:
        now = self.clock.now()
        p = self.prefix

        def run(cur: Cursor) -> tuple[QueueInfo, bool]:
            cur.execute(
                self.dialect.ignore_sql(
                    f"{p}queues",
                    "name, attrs, created_at, updated_at, tokens, tokens_at",
                    "name",
                ),
                (name, attributes.to_json(), now, now, attributes.rate_limit or 0, now),
            )
            created = cur.rowcount > 0
            info = self._info(cur, name)
            if not created and info.attributes != attributes:
                raise QueueExists(
                    f"queue {name!r} exists with different attributes: use set_attributes"
                    " to change them"
                )
            return info, created

        self._forget(name)
        return self._run(run)

    def delete_queue(self, name: str) -> None:
        p = self.prefix

        def run(cur: Cursor) -> None:
            qid, _ = self._queue(cur, name, lock=True)
            cur.execute(f"DELETE FROM {p}queues WHERE id = %s", (qid,))
            cur.execute(f"DELETE FROM {p}messages WHERE queue_id = %s", (qid,))
            cur.execute(f"DELETE FROM {p}dedup WHERE queue_id = %s", (qid,))
            cur.execute(f"DELETE FROM {p}subscriptions WHERE queue_id = %s", (qid,))
            self._pl_forget(_Exec(cur), qid)

        try:
            self._run(run)
        finally:
            self._forget(name)

    def list_queues(self, prefix: str = "") -> list[str]:
        return self._names("queues", prefix)

    def get_queue(self, name: str) -> QueueInfo:
        return self._run(lambda cur: self._info(cur, name), tx=False)

    def set_queue_attributes(self, name: str, attributes: QueueAttributes) -> QueueInfo:
        now = self.clock.now()
        p = self.prefix

        def run(cur: Cursor) -> QueueInfo:
            cur.execute(
                f"UPDATE {p}queues SET attrs = %s, updated_at = %s WHERE name = %s",
                (attributes.to_json(), now, name),
            )
            return self._info(cur, name)

        try:
            return self._run(run)
        finally:
            self._forget(name)

    def purge_queue(self, name: str) -> int:
        def run(cur: Cursor) -> int:
            qid, _ = self._queue(cur, name)
            cur.execute(f"DELETE FROM {self.prefix}messages WHERE queue_id = %s", (qid,))
            return int(cur.rowcount)

        return self._run(run)

    def _sweep(
        self, qid: int, name: str, attrs: QueueAttributes, now: float, force: bool = False
    ) -> None:
        """Remove messages past retention or deadline; forget old dedup ids.

        Receives never deliver such messages (they filter on both), so this only reclaims
        space and counts them: once a minute per queue and process, and before stats. The
        periodic sweep costs what it removes, not the queue's depth: messages past their
        deadline come from the deadline index, and those past retention from the queue's
        head in delivery order (the oldest; SWEEP_HEAD rows at a time, so a deep queue is
        cleared over several sweeps). Stats read the whole queue anyway, and sweep it whole.
        """
        if not force and now - self._swept.get(qid, -1e18) < 60.0:
            return
        self._swept[qid] = now
        p = self.prefix
        horizon = now - attrs.retention

        def run(cur: Cursor) -> None:
            if force:
                cond = "queue_id = %s AND (sent_at < %s OR deadline <= %s)"
                params: tuple[Any, ...] = (qid, horizon, now)
            else:
                cur.execute(
                    f"SELECT seq FROM (SELECT seq, sent_at FROM {p}messages WHERE queue_id = %s"
                    f" ORDER BY nprio, seq LIMIT {SWEEP_HEAD}) h WHERE sent_at < %s",
                    (qid, horizon),
                )
                seqs = {int(r[0]) for r in cur.fetchall()}
                cur.execute(
                    f"SELECT seq FROM {p}messages WHERE deadline <= %s AND queue_id = %s"
                    f" LIMIT {SWEEP_HEAD}",
                    (now, qid),
                )
                seqs.update(int(r[0]) for r in cur.fetchall())
                ordered = sorted(seqs)
                cond = f"queue_id = %s AND seq IN ({in_list(ordered)})" if ordered else ""
                params = (qid, *ordered)
            if cond:
                if attrs.archive:
                    cur.execute(
                        f"{archive_insert(p)} WHERE {cond}", (name, now, "expired", *params)
                    )
                cur.execute(f"DELETE FROM {p}messages WHERE {cond}", params)
                if cur.rowcount:
                    cur.execute(
                        f"UPDATE {p}queues SET expired = expired + %s WHERE id = %s",
                        (cur.rowcount, qid),
                    )
            cur.execute(
                f"DELETE FROM {p}dedup WHERE queue_id = %s AND expires_at <= %s", (qid, now)
            )

        self._run(run)

    def queue_stats(self, name: str) -> QueueStats:
        now = self.clock.now()
        p = self.prefix
        qid, attrs = self._lookup(name)
        self._sweep(qid, name, attrs, now, force=True)
        self._flush()

        def run(cur: Cursor) -> QueueStats:
            qid, _ = self._queue(cur, name)
            cur.execute(
                "SELECT coalesce(sum(CASE WHEN visible_at <= %s THEN 1 ELSE 0 END), 0),"
                " coalesce(sum(CASE WHEN visible_at > %s AND receive_count = 0 THEN 1 ELSE 0"
                " END), 0), coalesce(sum(CASE WHEN visible_at > %s AND receive_count > 0 THEN 1"
                f" ELSE 0 END), 0), min(sent_at) FROM {p}messages WHERE queue_id = %s",
                (now, now, now, qid),
            )
            ready, delayed, in_flight, oldest = cur.fetchone()
            cur.execute(
                f"SELECT sent, received, deleted, dead, expired FROM {p}queues WHERE id = %s",
                (qid,),
            )
            sent, received, deleted, dead, expired = cur.fetchone()
            return QueueStats(
                queue=name,
                ready=int(ready),
                delayed=int(delayed),
                in_flight=int(in_flight),
                dead=int(dead),
                expired=int(expired),
                oldest_age=None if oldest is None else max(0.0, now - oldest),
                sent=int(sent),
                received=int(received),
                deleted=int(deleted),
            )

        return self._run(run)
