"""The SQLite store's inspection, in-place editing, topics and consumer registry."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..clock import Clock
from ..exceptions import (
    InvalidState,
    MessageNotFound,
    NotFound,
    QueueDoesNotExist,
    TopicDoesNotExist,
)
from ..models import (
    ArchivedMessage,
    Consumer,
    Message,
    MessageState,
    MessageUpdate,
    NewMessage,
    QueueAttributes,
    SendResult,
)
from .rows import encode_attributes, row_to_archived, row_to_consumer, row_to_message
from .sqlite_schema import (
    COPY_COLUMNS,
    MESSAGE_COLUMNS,
    archive_insert,
    last_rowid,
)
from .sqlite_writes import SQLiteWrites


class SQLiteAdmin(SQLiteWrites):
    """Mixed into `SQLiteBackend`; uses its transactions and queue lookups."""

    clock: Clock

    if TYPE_CHECKING:

        def notify(self, queue: str) -> None: ...

    # -- moves between queues (expiry, dead letters, redrive) -----------------------------

    def _expire(
        self,
        conn: sqlite3.Connection,
        qid: int,
        queue: str,
        attrs: QueueAttributes,
        rowid: int,
        now: float,
    ) -> None:
        t = f"q{qid}"
        if attrs.archive:
            conn.execute(f"{archive_insert(t)} WHERE rowid = ?", (queue, now, "expired", rowid))
        conn.execute(f"DELETE FROM {t} WHERE rowid = ?", (rowid,))
        conn.execute("UPDATE queues SET expired = expired + 1 WHERE id = ?", (qid,))

    def _move(
        self,
        conn: sqlite3.Connection,
        src: int,
        dest: int,
        rowid: int,
        *,
        dead_from: str | None,
        error: str | None = None,
    ) -> int:
        """Move a message to the back of another queue's table; returns its new rowid.

        Into a dead-letter queue (`dead_from` names the source): keeps sent_at, records the
        source and `error` (or the error it had). Out of one (`dead_from` None, a redrive):
        sent now, source and error cleared. A message of the same id already in the
        destination is replaced; receive count and receipts start afresh.
        """
        s, d = f"q{src}", f"q{dest}"
        message_id, priority = conn.execute(
            f"SELECT id, priority FROM {s} WHERE rowid = ?", (rowid,)
        ).fetchone()
        old = self._find(conn, d, message_id)
        if old is not None:
            conn.execute(f"DELETE FROM {d} WHERE rowid = ?", (old,))
        new = last_rowid(conn, d, priority) + 1
        conn.execute(
            f"INSERT INTO {d} (rowid, {COPY_COLUMNS}, sent_at, visible_at, source_queue, error,"
            f" indexed) SELECT ?1, {COPY_COLUMNS}, CASE WHEN ?3 IS NULL THEN ?2 ELSE sent_at END,"
            " ?2, ?3, CASE WHEN ?3 IS NULL THEN NULL ELSE coalesce(?4, error) END, 1"
            f" FROM {s} WHERE rowid = ?5",
            (new, self.clock.now(), dead_from, error, rowid),
        )
        conn.execute(f"DELETE FROM {s} WHERE rowid = ?", (rowid,))
        return new

    def _to_dlq(
        self,
        conn: sqlite3.Connection,
        qid: int,
        queue: str,
        dlq_id: int,
        rowid: int,
        now: float,
        error: str | None,
    ) -> int:
        moved = self._move(conn, qid, dlq_id, rowid, dead_from=queue, error=error)
        conn.execute("UPDATE queues SET dead = dead + 1 WHERE id = ?", (qid,))
        return moved

    # -- inspection and editing -----------------------------------------------------------

    def _message_row(
        self, conn: sqlite3.Connection, qid: int, queue: str, message_id: str
    ) -> tuple[Any, ...]:
        rowid = self._find(conn, f"q{qid}", message_id)
        row = (
            None
            if rowid is None
            else conn.execute(
                f"SELECT {MESSAGE_COLUMNS} FROM q{qid} WHERE rowid = ?", (rowid,)
            ).fetchone()
        )
        if row is None:
            raise MessageNotFound(f"no message {message_id!r} in queue {queue!r}")
        return tuple(row)

    def list_messages(
        self,
        queue: str,
        *,
        state: MessageState | None = None,
        limit: int = 100,
        after: int = 0,
    ) -> list[Message]:
        now = self.clock.now()
        where = {
            None: "1",
            MessageState.READY: "visible_at <= :now",
            MessageState.DELAYED: "visible_at > :now AND receive_count = 0",
            MessageState.IN_FLIGHT: "visible_at > :now AND receive_count > 0",
        }[state]
        with self._tx() as conn:
            qid, _ = self._queue(conn, queue)
            rows = conn.execute(
                f"SELECT {MESSAGE_COLUMNS} FROM q{qid} WHERE rowid > :after AND {where}"
                " ORDER BY rowid LIMIT :limit",
                {"after": after, "now": now, "limit": limit},
            ).fetchall()
        return [row_to_message(queue, r) for r in rows]

    def get_message(self, queue: str, message_id: str) -> Message:
        with self._tx() as conn:
            qid, _ = self._queue(conn, queue)
            return row_to_message(queue, self._message_row(conn, qid, queue, message_id))

    def update_message(self, queue: str, message_id: str, update: MessageUpdate) -> Message:
        with self._tx() as conn:
            qid, attrs = self._queue(conn, queue)
            t = f"q{qid}"
            row = self._message_row(conn, qid, queue, message_id)
            sets: list[str] = ["version = version + 1"]
            params: list[Any] = []
            if update.body is not None:
                sets += ["body = ?", "compressed = ?"]
                params += [update.body, int(bool(update.compressed))]
            if update.attributes is not None:
                sets.append("attributes = ?")
                params.append(encode_attributes(update.attributes))
            if update.visible_at is not None:
                sets.append("visible_at = ?")
                params.append(update.visible_at)
            rowid = row[0]
            if update.priority is not None and not attrs.fifo and update.priority != row[6]:
                # a new priority is a new place in the table: move the row into its band
                new = last_rowid(conn, t, update.priority) + 1
                conn.execute(
                    f"UPDATE {t} SET rowid = ?, priority = ?, indexed = 1 WHERE rowid = ?",
                    (new, update.priority, rowid),
                )
                rowid = new
            conn.execute(f"UPDATE {t} SET {', '.join(sets)} WHERE rowid = ?", (*params, rowid))
            row = self._message_row(conn, qid, queue, message_id)
        self.notify(queue)
        return row_to_message(queue, row)

    def remove_message(self, queue: str, message_id: str) -> None:
        now = self.clock.now()
        with self._tx() as conn:
            qid, attrs = self._queue(conn, queue)
            t = f"q{qid}"
            rowid = self._message_row(conn, qid, queue, message_id)[0]
            if attrs.archive:
                conn.execute(f"{archive_insert(t)} WHERE rowid = ?", (queue, now, "removed", rowid))
            conn.execute(f"DELETE FROM {t} WHERE rowid = ?", (rowid,))

    def move_to_dlq(self, queue: str, message_id: str, error: str | None = None) -> Message:
        now = self.clock.now()
        with self._tx() as conn:
            qid, attrs = self._queue(conn, queue)
            row = self._message_row(conn, qid, queue, message_id)
            policy = attrs.dead_letter
            if policy is None:
                raise InvalidState(
                    f"queue {queue!r} has no dead-letter queue: set its dead_letter policy first"
                )
            try:
                dlq_id, _ = self._queue(conn, policy.queue)
            except QueueDoesNotExist:
                raise QueueDoesNotExist(
                    f"dead-letter queue {policy.queue!r} of {queue!r} does not exist: create it"
                ) from None
            rowid = self._to_dlq(conn, qid, queue, dlq_id, row[0], now, error)
            moved = conn.execute(
                f"SELECT {MESSAGE_COLUMNS} FROM q{dlq_id} WHERE rowid = ?", (rowid,)
            ).fetchone()
        self.notify(policy.queue)
        return row_to_message(policy.queue, moved)

    def redrive(
        self,
        queue: str,
        *,
        ids: Sequence[str] | None = None,
        limit: int = 100,
        to: str | None = None,
    ) -> list[str]:
        now = self.clock.now()
        touched: set[str] = set()
        moved: list[str] = []
        with self._tx() as conn:
            qid, _ = self._queue(conn, queue)
            if ids is not None:
                rows = [self._message_row(conn, qid, queue, mid) for mid in ids]
                for row in rows:
                    if row[9] > now and row[10] > 0:
                        raise InvalidState(
                            f"message {row[1]!r} is in flight: wait for its visibility timeout"
                            " or delete it"
                        )
            else:
                rows = conn.execute(
                    f"SELECT {MESSAGE_COLUMNS} FROM q{qid} WHERE visible_at <= ?"
                    " ORDER BY rowid LIMIT ?",
                    (now, limit),
                ).fetchall()
            dests: dict[str, int] = {}
            for row in rows:
                dest = to or row[13]
                if dest is None:
                    raise InvalidState(
                        f"message {row[1]!r} has no source queue: name a destination with `to`"
                    )
                if dest not in dests:
                    dests[dest] = self._queue(conn, dest)[0]
            for row in rows:
                dest = to or row[13]
                self._move(conn, qid, dests[dest], row[0], dead_from=None)
                self._count(dests[dest], sent=1)
                touched.add(dest)
                moved.append(row[1])
        for name in touched:
            self.notify(name)
        return moved

    def reset_message(self, queue: str, message_id: str) -> Message:
        return self._release(
            queue, message_id, 0.0, "receive_count = 0, first_received_at = NULL, "
        )

    def fail_message(self, queue: str, message_id: str, delay: float = 0.0) -> Message:
        return self._release(queue, message_id, delay, "")

    def _release(self, queue: str, message_id: str, delay: float, extra: str) -> Message:
        now = self.clock.now()
        with self._tx() as conn:
            qid, _ = self._queue(conn, queue)
            rowid = self._message_row(conn, qid, queue, message_id)[0]
            conn.execute(
                f"UPDATE q{qid} SET {extra}visible_at = ?, token = NULL, version = version + 1"
                " WHERE rowid = ?",
                (now + delay, rowid),
            )
            row = self._message_row(conn, qid, queue, message_id)
        if delay == 0:
            self.notify(queue)
        return row_to_message(queue, row)

    def list_archive(
        self, queue: str, *, limit: int = 1000, after: int = 0
    ) -> list[ArchivedMessage]:
        rows = self._read(
            "SELECT queue, id, body, attributes, group_id, priority, sent_at, first_received_at,"
            " removed_at, receive_count, outcome, compressed FROM archive"
            " WHERE queue = ? ORDER BY seq LIMIT ? OFFSET ?",
            (queue, limit, after),
        )
        return [row_to_archived(r) for r in rows]

    # -- topics ---------------------------------------------------------------------------

    def _topic(self, conn: sqlite3.Connection, name: str) -> None:
        if conn.execute("SELECT 1 FROM topics WHERE name = ?", (name,)).fetchone() is None:
            raise TopicDoesNotExist(f"topic {name!r} does not exist: create it first")

    def create_topic(self, name: str) -> bool:
        with self._tx() as conn:
            cur = conn.execute(
                "INSERT OR IGNORE INTO topics (name, created_at) VALUES (?, ?)",
                (name, self.clock.now()),
            )
            return cur.rowcount > 0

    def delete_topic(self, name: str) -> None:
        with self._tx() as conn:
            self._topic(conn, name)
            conn.execute("DELETE FROM subscriptions WHERE topic = ?", (name,))
            conn.execute("DELETE FROM topics WHERE name = ?", (name,))

    def list_topics(self, prefix: str = "") -> list[str]:
        rows = self._read("SELECT name FROM topics ORDER BY name")
        return [r[0] for r in rows if r[0].startswith(prefix)]

    def subscribe(self, topic: str, queue: str) -> None:
        with self._tx() as conn:
            self._topic(conn, topic)
            qid, _ = self._queue(conn, queue)
            conn.execute(
                "INSERT OR IGNORE INTO subscriptions (topic, queue_id) VALUES (?, ?)", (topic, qid)
            )

    def unsubscribe(self, topic: str, queue: str) -> None:
        with self._tx() as conn:
            self._topic(conn, topic)
            conn.execute(
                "DELETE FROM subscriptions WHERE topic = ?"
                " AND queue_id = (SELECT id FROM queues WHERE name = ?)",
                (topic, queue),
            )

    def _subscribers(self, conn: sqlite3.Connection, topic: str) -> list[str]:
        self._topic(conn, topic)
        rows = conn.execute(
            "SELECT q.name FROM subscriptions s JOIN queues q ON q.id = s.queue_id"
            " WHERE s.topic = ? ORDER BY q.name",
            (topic,),
        ).fetchall()
        return [r[0] for r in rows]

    def topic_queues(self, topic: str) -> list[str]:
        with self._tx() as conn:
            return self._subscribers(conn, topic)

    def publish(self, topic: str, message: NewMessage) -> dict[str, SendResult]:
        now = self.clock.now()
        out: dict[str, SendResult] = {}
        with self._tx() as conn:
            for name in self._subscribers(conn, topic):
                qid, attrs = self._queue(conn, name)
                out[name] = self._send_locked(conn, qid, attrs, [message], now)[0]
        for name in out:
            self.notify(name)
        return out

    # -- consumers ------------------------------------------------------------------------

    def register_consumer(self, consumer: Consumer) -> Consumer:
        now = self.clock.now()
        with self._tx() as conn:
            old = conn.execute(
                "SELECT registered_at FROM consumers WHERE id = ?", (consumer.id,)
            ).fetchone()
            registered = consumer.registered_at or (old[0] if old else now)
            conn.execute(
                "INSERT OR REPLACE INTO consumers (id, queue, info, timeout, registered_at,"
                " heartbeat_at) VALUES (?, ?, ?, ?, ?, ?)",
                (
                    consumer.id,
                    consumer.queue,
                    json.dumps(dict(consumer.info)),
                    consumer.timeout,
                    registered,
                    now,
                ),
            )
        return Consumer(
            id=consumer.id,
            queue=consumer.queue,
            info=dict(consumer.info),
            timeout=consumer.timeout,
            registered_at=registered,
            heartbeat_at=now,
        )

    def heartbeat(self, consumer_id: str) -> Consumer:
        now = self.clock.now()
        with self._tx() as conn:
            conn.execute("DELETE FROM consumers WHERE heartbeat_at + timeout < ?", (now,))
            n = conn.execute(
                "UPDATE consumers SET heartbeat_at = ? WHERE id = ?", (now, consumer_id)
            ).rowcount
            if not n:
                raise NotFound(f"consumer {consumer_id!r} is not registered (it was pruned?)")
            row = conn.execute(
                "SELECT id, queue, info, timeout, registered_at, heartbeat_at FROM consumers"
                " WHERE id = ?",
                (consumer_id,),
            ).fetchone()
        return row_to_consumer(row)

    def unregister_consumer(self, consumer_id: str) -> None:
        with self._tx() as conn:
            conn.execute("DELETE FROM consumers WHERE id = ?", (consumer_id,))

    def list_consumers(self, queue: str | None = None) -> list[Consumer]:
        now = self.clock.now()
        with self._tx() as conn:
            conn.execute("DELETE FROM consumers WHERE heartbeat_at + timeout < ?", (now,))
            rows = conn.execute(
                "SELECT id, queue, info, timeout, registered_at, heartbeat_at FROM consumers"
                " WHERE ?1 IS NULL OR queue = ?1 ORDER BY registered_at, id",
                (queue,),
            ).fetchall()
        return [row_to_consumer(r) for r in rows]
