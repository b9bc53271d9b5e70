"""The SQL store's topics and consumer registry: a part the store holds."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ...exceptions import OutcomeUnknown
from ...models import Consumer, NewMessage, SendResult
from ..base import Consumers, Topics, merge_settings, routed
from ..errors import consumer_gone, no_topic, not_subscribed
from .connections import Exec
from .rows import CONSUMER_COLUMNS, row_consumer

if TYPE_CHECKING:
    from .store import SQLStore


class SQLRegistry(Topics, Consumers):
    """Topics, subscriptions and consumers in the store's tables."""

    def __init__(self, store: SQLStore[Any]) -> None:
        self.store = store
        self.p = store.dialect.prefix

    # -- topics ---------------------------------------------------------------------------

    def _topic(self, ex: Exec, name: str, *, lock: bool = False) -> dict[str, str]:
        row = ex.one(
            f"SELECT settings FROM {self.p}topics WHERE name = %s"
            f"{self.store.dialect.for_update if lock else ''}",
            (name,),
        )
        if row is None:
            raise no_topic(name)
        return _strings(row[0])

    def create_topic(self, name: str) -> bool:
        d = self.store.dialect
        statement = d.ignore(f"{self.p}topics", "name, created_at", "name")
        now = self.store.clock.now()
        created: int = self.store.write(lambda ex: ex.run(statement, (name, now)), single=True)
        return created > 0

    def delete_topic(self, name: str) -> None:
        def run(ex: Exec) -> None:
            self._topic(ex, name)
            ex.run(f"DELETE FROM {self.p}subscriptions WHERE topic = %s", (name,))
            ex.run(f"DELETE FROM {self.p}topics WHERE name = %s", (name,))

        self.store.write(run)

    def list_topics(self, prefix: str = "") -> list[str]:
        return self.store.names("topics", prefix)

    def topic_settings(self, name: str) -> dict[str, str]:
        return self.store.read(lambda ex: self._topic(ex, name))

    def update_topic_settings(self, name: str, changes: Mapping[str, str | None]) -> dict[str, str]:
        def run(ex: Exec) -> dict[str, str]:
            settings = merge_settings(self._topic(ex, name, lock=True), changes)
            ex.run(
                f"UPDATE {self.p}topics SET settings = %s WHERE name = %s",
                (json.dumps(settings), name),
            )
            return settings

        return self.store.write(run)

    def subscribe(
        self, topic: str, queue: str, attributes: Mapping[str, str] | None = None
    ) -> None:
        p = self.p
        statement = self.store.dialect.ignore(
            f"{p}subscriptions", "topic, queue_id", "topic, queue_id"
        )

        def run(ex: Exec) -> None:
            self._topic(ex, topic)
            qid, _ = self.store.queue_row(ex, queue)
            ex.run(statement, (topic, qid))
            if attributes is not None:
                ex.run(
                    f"UPDATE {p}subscriptions SET attributes = %s"
                    " WHERE topic = %s AND queue_id = %s",
                    (json.dumps(dict(attributes)), topic, qid),
                )

        self.store.write(run)

    def unsubscribe(self, topic: str, queue: str) -> None:
        p = self.p

        def run(ex: Exec) -> None:
            self._topic(ex, topic)
            ex.run(
                f"DELETE FROM {p}subscriptions WHERE topic = %s AND queue_id IN"
                f" (SELECT id FROM {p}queues WHERE name = %s)",
                (topic, queue),
            )

        self.store.write(run)

    def _subscribers(self, ex: Exec, topic: str) -> dict[str, dict[str, str]]:
        self._topic(ex, topic)
        p = self.p
        rows = ex.rows(
            f"SELECT q.name, s.attributes FROM {p}subscriptions s"
            f" JOIN {p}queues q ON q.id = s.queue_id WHERE s.topic = %s ORDER BY q.name",
            (topic,),
        )
        return {name: _strings(attributes) for name, attributes in rows}

    def subscriptions(self, topic: str) -> dict[str, dict[str, str]]:
        return self.store.read(lambda ex: self._subscribers(ex, topic))

    def update_subscription(
        self, topic: str, queue: str, changes: Mapping[str, str | None]
    ) -> dict[str, str]:
        p, d = self.p, self.store.dialect

        def run(ex: Exec) -> dict[str, str]:
            self._topic(ex, topic)
            row = ex.one(
                f"SELECT s.queue_id, s.attributes FROM {p}subscriptions s"
                f" JOIN {p}queues q ON q.id = s.queue_id"
                f" WHERE s.topic = %s AND q.name = %s{d.for_update}",
                (topic, queue),
            )
            if row is None:
                raise not_subscribed(topic, queue)
            qid, current = row
            attributes = merge_settings(_strings(current), changes)
            ex.run(
                f"UPDATE {p}subscriptions SET attributes = %s WHERE topic = %s AND queue_id = %s",
                (json.dumps(attributes), topic, qid),
            )
            return attributes

        return self.store.write(run)

    def publish(
        self, topic: str, message: NewMessage | Mapping[str, NewMessage]
    ) -> dict[str, SendResult]:
        store = self.store
        now = store.clock.now()

        def run(ex: Any) -> dict[str, tuple[int, SendResult]]:
            if ex.in_doubt:  # an attempt may have committed copies received and deleted since
                raise OutcomeUnknown.of_publish(topic)
            out: dict[str, tuple[int, SendResult]] = {}
            for name, copy in routed(self._subscribers(ex, topic), message):
                qid, attrs = store.queue_row(ex, name)
                [result] = store.send_each(ex, name, qid, attrs, [copy], now, None)
                out[name] = (qid, result)
            return out

        out = store.counted_write(
            run,
            "sent",
            lambda done: [(qid, 1) for qid, result in done.values() if not result.duplicate],
        )
        for name in out:
            store.notify(name)
        return {name: result for name, (_, result) in out.items()}

    # -- consumers ------------------------------------------------------------------------

    def register_consumer(self, consumer: Consumer) -> Consumer:
        now = self.store.clock.now()
        p = self.p
        upsert = self.store.dialect.upsert(f"{p}consumers", CONSUMER_COLUMNS, "id")

        def run(ex: Exec) -> float:
            old = ex.one(f"SELECT registered_at FROM {p}consumers WHERE id = %s", (consumer.id,))
            before = now
            if old is not None:
                (before,) = old
            registered = consumer.registered_at or before
            ex.run(
                upsert,
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

        registered = self.store.write(run)
        return dataclasses.replace(
            consumer, info=dict(consumer.info), registered_at=registered, heartbeat_at=now
        )

    def _prune(self, ex: Exec, now: float) -> None:
        """Live consumers drop the ones that missed their heartbeats."""
        ex.run(f"DELETE FROM {self.p}consumers WHERE heartbeat_at + timeout < %s", (now,))

    def heartbeat(self, consumer_id: str) -> Consumer:
        now = self.store.clock.now()
        p = self.p

        def run(ex: Exec) -> Consumer:
            self._prune(ex, now)
            ex.run(f"UPDATE {p}consumers SET heartbeat_at = %s WHERE id = %s", (now, consumer_id))
            row = ex.one(
                f"SELECT {CONSUMER_COLUMNS} FROM {p}consumers WHERE id = %s", (consumer_id,)
            )
            if row is None:
                raise consumer_gone(consumer_id)
            return row_consumer(row)

        return self.store.write(run)

    def unregister_consumer(self, consumer_id: str) -> None:
        self.store.write(
            lambda ex: ex.run(f"DELETE FROM {self.p}consumers WHERE id = %s", (consumer_id,)),
            single=True,
        )

    def list_consumers(self, queue: str | None = None) -> list[Consumer]:
        now = self.store.clock.now()

        def run(ex: Exec) -> list[Consumer]:
            self._prune(ex, now)
            where, params = ("", ()) if queue is None else (" WHERE queue_name = %s", (queue,))
            rows = ex.rows(
                f"SELECT {CONSUMER_COLUMNS} FROM {self.p}consumers{where}"
                " ORDER BY registered_at, id",
                params,
            )
            return [row_consumer(row) for row in rows]

        return self.store.write(run)


def _strings(text: str | None) -> dict[str, str]:
    """A JSON string map from its column (NULL: none)."""
    return {str(k): str(v) for k, v in json.loads(text).items()} if text else {}
