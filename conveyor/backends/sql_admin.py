"""The SQL stores' inspection, in-place editing, topics and consumer registry."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..exceptions import (
    InvalidState,
    MessageNotFound,
    NotFound,
    QueueDoesNotExist,
    TopicDoesNotExist,
)
from ..ids import new_id
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
from .rows import encode_attributes, row_to_archived, row_to_consumer
from .sql_conn import Cursor, SQLConnections
from .sql_schema import (
    ARCHIVE_COLUMNS,
    COPY_COLUMNS,
    MESSAGE_COLUMNS,
    after_key,
    archive_insert,
    to_message,
)

CONSUMER_COLUMNS = "id, queue_name, info, timeout, registered_at, heartbeat_at"


class SQLAdmin(SQLConnections):
    """Mixed into `SQLBackend`; uses its transactions, lookups and moves."""

    if TYPE_CHECKING:

        def _send_locked(
            self,
            cur: Cursor,
            queue: str,
            qid: int,
            attrs: QueueAttributes,
            messages: Sequence[NewMessage],
            now: float,
        ) -> list[SendResult]: ...
        def _notify_waiters(self, cur: Cursor, queue: str) -> None: ...
        def _insert_select(self, cur: Cursor, sql: str, params: Sequence[Any]) -> int: ...
        def notify(self, queue: str) -> None: ...

    # -- moving messages between queues --------------------------------------------------

    def _expire(
        self, cur: Cursor, qid: int, queue: str, attrs: QueueAttributes, seq: int, now: float
    ) -> None:
        p = self.prefix
        if attrs.archive:
            cur.execute(f"{archive_insert(p)} WHERE seq = %s", (queue, now, "expired", seq))
        cur.execute(f"DELETE FROM {p}messages WHERE seq = %s", (seq,))
        cur.execute(f"UPDATE {p}queues SET expired = expired + 1 WHERE id = %s", (qid,))

    def _move(
        self,
        cur: Cursor,
        dest: int,
        seq: int,
        *,
        dead_from: str | None,
        error: str | None = None,
    ) -> int:
        """Move a message to the back of another queue; returns its new seq.

        Into a dead-letter queue (`dead_from` names the source): keeps sent_at, records the
        source and `error` (or the error it had). Out of one (`dead_from` None, a redrive):
        sent now, source and error cleared. A message of the same id already in the
        destination is replaced; receive count and receipts start afresh.
        """
        p = self.prefix
        now = self.clock.now()
        cur.execute(f"SELECT id FROM {p}messages WHERE seq = %s", (seq,))
        (message_id,) = cur.fetchone()
        cur.execute(f"DELETE FROM {p}messages WHERE queue_id = %s AND id = %s", (dest, message_id))
        if dead_from is not None:
            sql = (
                f"INSERT INTO {p}messages (queue_id, {COPY_COLUMNS}, sent_at, visible_at,"
                f" source_queue, error) SELECT %s, {COPY_COLUMNS}, sent_at, %s, %s,"
                f" coalesce(%s, error) FROM {p}messages WHERE seq = %s"
            )
            params: tuple[Any, ...] = (dest, now, dead_from, error, seq)
        else:
            sql = (
                f"INSERT INTO {p}messages (queue_id, {COPY_COLUMNS}, sent_at, visible_at)"
                f" SELECT %s, {COPY_COLUMNS}, %s, %s FROM {p}messages WHERE seq = %s"
            )
            params = (dest, now, now, seq)
        new = self._insert_select(cur, sql, params)
        cur.execute(f"DELETE FROM {p}messages WHERE seq = %s", (seq,))
        return new

    def _to_dlq(
        self, cur: Cursor, qid: int, queue: str, dlq_id: int, seq: int, error: str | None
    ) -> int:
        moved = self._move(cur, dlq_id, seq, dead_from=queue, error=error)
        cur.execute(f"UPDATE {self.prefix}queues SET dead = dead + 1 WHERE id = %s", (qid,))
        return moved

    # -- inspection and editing -----------------------------------------------------------

    def list_messages(
        self,
        queue: str,
        *,
        state: MessageState | None = None,
        limit: int = 100,
        after: int = 0,
    ) -> list[Message]:
        now = self.clock.now()
        where, extra = {
            None: ("", ()),
            MessageState.READY: (" AND visible_at <= %s", (now,)),
            MessageState.DELAYED: (" AND visible_at > %s AND receive_count = 0", (now,)),
            MessageState.IN_FLIGHT: (" AND visible_at > %s AND receive_count > 0", (now,)),
        }[state]
        nprio, seq = after_key(after)

        def run(cur: Cursor) -> list[Message]:
            qid, _ = self._queue(cur, queue)
            cur.execute(
                f"SELECT {MESSAGE_COLUMNS} FROM {self.prefix}messages WHERE queue_id = %s"
                f" AND (nprio > %s OR (nprio = %s AND seq > %s)){where}"
                " ORDER BY nprio, seq LIMIT %s",
                (qid, nprio, nprio, seq, *extra, limit),
            )
            return [to_message(queue, r) for r in cur.fetchall()]

        return self._run(run, tx=False)

    def _message_row(self, cur: Cursor, qid: int, queue: str, message_id: str) -> tuple[Any, ...]:
        cur.execute(
            f"SELECT {MESSAGE_COLUMNS} FROM {self.prefix}messages WHERE queue_id = %s AND id = %s",
            (qid, message_id),
        )
        row = cur.fetchone()
        if row is None:
            raise MessageNotFound(f"no message {message_id!r} in queue {queue!r}")
        return tuple(row)

    def get_message(self, queue: str, message_id: str) -> Message:
        def run(cur: Cursor) -> Message:
            qid, _ = self._queue(cur, queue)
            return to_message(queue, self._message_row(cur, qid, queue, message_id))

        return self._run(run, tx=False)

    def update_message(self, queue: str, message_id: str, update: MessageUpdate) -> Message:
        def run(cur: Cursor) -> Message:
            qid, attrs = self._queue(cur, queue)
            row = self._message_row(cur, qid, queue, message_id)
            sets: list[str] = ["version = version + 1"]
            params: list[Any] = []
            if update.body is not None:
                sets += ["body = %s", "compressed = %s"]
                params += [update.body, int(bool(update.compressed))]
            if update.attributes is not None:
                sets.append("attributes = %s")
                params.append(encode_attributes(update.attributes))
            if update.visible_at is not None:
                sets.append("visible_at = %s")
                params.append(update.visible_at)
            if update.priority is not None and not attrs.fifo:
                sets.append("nprio = %s")
                params.append(-update.priority)
            cur.execute(
                f"UPDATE {self.prefix}messages SET {', '.join(sets)} WHERE seq = %s",
                (*params, row[0]),
            )
            self._notify_waiters(cur, queue)
            return to_message(queue, self._message_row(cur, qid, queue, message_id))

        message = self._run(run)
        self.notify(queue)
        return message

    def remove_message(self, queue: str, message_id: str) -> None:
        now = self.clock.now()
        p = self.prefix

        def run(cur: Cursor) -> None:
            qid, attrs = self._queue(cur, queue)
            seq = self._message_row(cur, qid, queue, message_id)[0]
            if attrs.archive:
                cur.execute(f"{archive_insert(p)} WHERE seq = %s", (queue, now, "removed", seq))
            cur.execute(f"DELETE FROM {p}messages WHERE seq = %s", (seq,))

        self._run(run)

    def move_to_dlq(self, queue: str, message_id: str, error: str | None = None) -> Message:
        def run(cur: Cursor) -> Message:
            qid, attrs = self._queue(cur, queue)
            row = self._message_row(cur, qid, queue, message_id)
            policy = attrs.dead_letter
            if policy is None:
                raise InvalidState(
                    f"queue {queue!r} has no dead-letter queue: set its dead_letter policy first"
                )
            try:
                dlq_id, _ = self._queue(cur, policy.queue)
            except QueueDoesNotExist:
                raise QueueDoesNotExist(
                    f"dead-letter queue {policy.queue!r} of {queue!r} does not exist: create it"
                ) from None
            seq = self._to_dlq(cur, qid, queue, dlq_id, row[0], error)
            self._notify_waiters(cur, policy.queue)
            cur.execute(
                f"SELECT {MESSAGE_COLUMNS} FROM {self.prefix}messages WHERE seq = %s", (seq,)
            )
            return to_message(policy.queue, cur.fetchone())

        message = self._run(run)
        self.notify(message.queue)
        return message

    def redrive(
        self,
        queue: str,
        *,
        ids: Sequence[str] | None = None,
        limit: int = 100,
        to: str | None = None,
    ) -> list[str]:
        now = self.clock.now()
        p = self.prefix

        def run(cur: Cursor) -> tuple[list[str], Counter[str], dict[str, int]]:
            qid, _ = self._queue(cur, queue)
            if ids is not None:
                rows = [self._message_row(cur, qid, queue, mid) for mid in ids]
                for row in rows:
                    if row[9] > now and row[10] > 0:
                        raise InvalidState(
                            f"message {row[1]!r} is in flight: wait for its visibility timeout"
                            " or delete it"
                        )
            else:
                cur.execute(
                    f"SELECT {MESSAGE_COLUMNS} FROM {p}messages WHERE queue_id = %s"
                    " AND visible_at <= %s ORDER BY nprio, seq LIMIT %s FOR UPDATE SKIP LOCKED",
                    (qid, now, limit),
                )
                rows = list(cur.fetchall())
            dests: dict[str, int] = {}
            for row in rows:
                dest = to or row[13]
                if dest is None:
                    raise InvalidState(
                        f"message {row[1]!r} has no source queue: name a destination with `to`"
                    )
                if dest not in dests:
                    dests[dest] = self._queue(cur, dest)[0]
            moved: list[str] = []
            arrived: Counter[str] = Counter()
            for row in rows:
                dest = to or row[13]
                self._move(cur, dests[dest], row[0], dead_from=None)
                moved.append(row[1])
                arrived[dest] += 1
            for name in dests:
                self._notify_waiters(cur, name)
            return moved, arrived, dests

        # counted once the transaction has committed, not once per attempt
        moved, arrived, dests = self._run(run)
        for name, n in arrived.items():
            self._count(dests[name], sent=n)
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

        def run(cur: Cursor) -> Message:
            qid, _ = self._queue(cur, queue)
            seq = self._message_row(cur, qid, queue, message_id)[0]
            cur.execute(
                f"UPDATE {self.prefix}messages SET {extra}visible_at = %s, token = NULL,"
                " version = version + 1 WHERE seq = %s",
                (now + delay, seq),
            )
            if delay == 0:
                self._notify_waiters(cur, queue)
            return to_message(queue, self._message_row(cur, qid, queue, message_id))

        message = self._run(run)
        if delay == 0:
            self.notify(queue)
        return message

    def list_archive(
        self, queue: str, *, limit: int = 1000, after: int = 0
    ) -> list[ArchivedMessage]:
        def run(cur: Cursor) -> list[ArchivedMessage]:
            cur.execute(
                f"SELECT {ARCHIVE_COLUMNS} FROM {self.prefix}archive WHERE queue_name = %s"
                " ORDER BY seq LIMIT %s OFFSET %s",
                (queue, limit, after),
            )
            return [row_to_archived((*r[:2], bytes(r[2]), *r[3:])) for r in cur.fetchall()]

        return self._run(run, tx=False)

    # -- topics ---------------------------------------------------------------------------

    def _topic(self, cur: Cursor, name: str) -> None:
        cur.execute(f"SELECT 1 FROM {self.prefix}topics WHERE name = %s", (name,))
        if cur.fetchone() is None:
            raise TopicDoesNotExist(f"topic {name!r} does not exist: create it first")

    def create_topic(self, name: str) -> bool:
        def run(cur: Cursor) -> bool:
            cur.execute(
                self.dialect.ignore_sql(f"{self.prefix}topics", "name, created_at", "name"),
                (name, self.clock.now()),
            )
            return bool(cur.rowcount > 0)

        return self._run(run, tx=False)

    def delete_topic(self, name: str) -> None:
        def run(cur: Cursor) -> None:
            self._topic(cur, name)
            cur.execute(f"DELETE FROM {self.prefix}subscriptions WHERE topic = %s", (name,))
            cur.execute(f"DELETE FROM {self.prefix}topics WHERE name = %s", (name,))

        self._run(run)

    def list_topics(self, prefix: str = "") -> list[str]:
        return self._names("topics", prefix)

    def subscribe(self, topic: str, queue: str) -> None:
        def run(cur: Cursor) -> None:
            self._topic(cur, topic)
            qid, _ = self._queue(cur, queue)
            cur.execute(
                self.dialect.ignore_sql(
                    f"{self.prefix}subscriptions", "topic, queue_id", "topic, queue_id"
                ),
                (topic, qid),
            )

        self._run(run)

    def unsubscribe(self, topic: str, queue: str) -> None:
        def run(cur: Cursor) -> None:
            self._topic(cur, topic)
            cur.execute(f"SELECT id FROM {self.prefix}queues WHERE name = %s", (queue,))
            row = cur.fetchone()
            if row is not None:
                cur.execute(
                    f"DELETE FROM {self.prefix}subscriptions WHERE topic = %s AND queue_id = %s",
                    (topic, row[0]),
                )

        self._run(run)

    def _subscribers(self, cur: Cursor, topic: str) -> list[str]:
        self._topic(cur, topic)
        p = self.prefix
        cur.execute(
            f"SELECT q.name FROM {p}subscriptions s JOIN {p}queues q ON q.id = s.queue_id"
            " WHERE s.topic = %s ORDER BY q.name",
            (topic,),
        )
        return [r[0] for r in cur.fetchall()]

    def topic_queues(self, topic: str) -> list[str]:
        return self._run(lambda cur: self._subscribers(cur, topic), tx=False)

    def publish(self, topic: str, message: NewMessage) -> dict[str, SendResult]:
        now = self.clock.now()
        # every copy has the same id, chosen before the first attempt
        if message.generated_id or not message.id:
            message = replace(message, id=new_id(), generated_id=False)

        def run(cur: Cursor) -> dict[str, SendResult]:
            out: dict[str, SendResult] = {}
            for name in self._subscribers(cur, topic):
                qid, attrs = self._queue(cur, name)
                out[name] = self._send_locked(cur, name, qid, attrs, [message], now)[0]
            return out

        out = self._run(run)
        for name, result in out.items():
            if not result.duplicate:
                self._count(self._lookup(name)[0], sent=1)
            self.notify(name)
        return out

    # -- consumers ------------------------------------------------------------------------

    def register_consumer(self, consumer: Consumer) -> Consumer:
        now = self.clock.now()
        p = self.prefix

        def run(cur: Cursor) -> float:
            cur.execute(f"SELECT registered_at FROM {p}consumers WHERE id = %s", (consumer.id,))
            old = cur.fetchone()
            registered = consumer.registered_at or (old[0] if old else now)
            cur.execute(
                self.dialect.upsert_sql(f"{p}consumers", CONSUMER_COLUMNS, "id"),
                (
                    consumer.id,
                    consumer.queue,
                    json.dumps(dict(consumer.info)),
                    consumer.timeout,
                    registered,
                    now,
                ),
            )
            return float(registered)

        registered = self._run(run)
        return Consumer(
            id=consumer.id,
            queue=consumer.queue,
            info=dict(consumer.info),
            timeout=consumer.timeout,
            registered_at=registered,
            heartbeat_at=now,
        )

    def _prune(self, cur: Cursor, now: float) -> None:
        """Live consumers drop the ones that missed their heartbeats."""
        cur.execute(f"DELETE FROM {self.prefix}consumers WHERE heartbeat_at + timeout < %s", (now,))

    def heartbeat(self, consumer_id: str) -> Consumer:
        now = self.clock.now()
        p = self.prefix

        def run(cur: Cursor) -> Consumer:
            self._prune(cur, now)
            cur.execute(
                f"UPDATE {p}consumers SET heartbeat_at = %s WHERE id = %s", (now, consumer_id)
            )
            cur.execute(
                f"SELECT {CONSUMER_COLUMNS} FROM {p}consumers WHERE id = %s", (consumer_id,)
            )
            row = cur.fetchone()
            if row is None:
                raise NotFound(f"consumer {consumer_id!r} is not registered (it was pruned?)")
            return row_to_consumer(row)

        return self._run(run)

    def unregister_consumer(self, consumer_id: str) -> None:
        def run(cur: Cursor) -> None:
            cur.execute(f"DELETE FROM {self.prefix}consumers WHERE id = %s", (consumer_id,))

        self._run(run, tx=False)

    def list_consumers(self, queue: str | None = None) -> list[Consumer]:
        now = self.clock.now()

        def run(cur: Cursor) -> list[Consumer]:
            self._prune(cur, now)
            where, params = ("", ()) if queue is None else (" WHERE queue_name = %s", (queue,))
            cur.execute(
                f"SELECT {CONSUMER_COLUMNS} FROM {self.prefix}consumers{where}"
                " ORDER BY registered_at, id",
                params,
            )
            return [row_to_consumer(r) for r in cur.fetchall()]

        return self._run(run)
