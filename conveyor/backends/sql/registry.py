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
from .rows import row_consumer
from .statements import (
    CONSUMER_HEARTBEAT,
    CONSUMER_REGISTERED,
    CONSUMER_ROW,
    CREATE_TOPIC,
    DELETE_TOPIC,
    DELETE_TOPIC_SUBSCRIPTIONS,
    LIST_CONSUMERS,
    LIST_QUEUE_CONSUMERS,
    PRUNE_CONSUMERS,
    REGISTER_CONSUMER,
    SET_SUBSCRIPTION,
    SET_TOPIC_SETTINGS,
    SUBSCRIBE,
    SUBSCRIBERS,
    SUBSCRIPTION_LOCKED,
    TOPIC_NAMES,
    TOPIC_SETTINGS,
    TOPIC_SETTINGS_LOCKED,
    UNREGISTER_CONSUMER,
    UNSUBSCRIBE,
)

if TYPE_CHECKING:
    from .store import SQLStore


class SQLRegistry(Topics, Consumers):
    """Topics, subscriptions and consumers in the store's tables."""

    def __init__(self, store: SQLStore[Any]) -> None:
        self.store = store
        self.sql = store.dialect.sql

    # -- topics ---------------------------------------------------------------------------

    def _topic(self, ex: Exec, name: str, *, lock: bool = False) -> dict[str, str]:
        row = ex.one(self.sql(TOPIC_SETTINGS_LOCKED if lock else TOPIC_SETTINGS), {"name": name})
        if row is None:
            raise no_topic(name)
        return _strings(row[0])

    def create_topic(self, name: str) -> bool:
        statement = self.sql(CREATE_TOPIC)
        values = {"name": name, "now": self.store.clock.now()}
        created: int = self.store.write(lambda ex: ex.run(statement, values), single=True)
        return created > 0

    def delete_topic(self, name: str) -> None:
        def run(ex: Exec) -> None:
            self._topic(ex, name)
            ex.run(self.sql(DELETE_TOPIC_SUBSCRIPTIONS), {"topic": name})
            ex.run(self.sql(DELETE_TOPIC), {"topic": name})

        self.store.write(run)

    def list_topics(self, prefix: str = "") -> list[str]:
        return self.store.names(TOPIC_NAMES, prefix)

    def topic_settings(self, name: str) -> dict[str, str]:
        return self.store.read(lambda ex: self._topic(ex, name))

    def update_topic_settings(self, name: str, changes: Mapping[str, str | None]) -> dict[str, str]:
        def run(ex: Exec) -> dict[str, str]:
            settings = merge_settings(self._topic(ex, name, lock=True), changes)
            ex.run(self.sql(SET_TOPIC_SETTINGS), {"settings": json.dumps(settings), "name": name})
            return settings

        return self.store.write(run)

    def subscribe(
        self, topic: str, queue: str, attributes: Mapping[str, str] | None = None
    ) -> None:
        def run(ex: Exec) -> None:
            self._topic(ex, topic)
            qid, _ = self.store.queue_row(ex, queue)
            ex.run(self.sql(SUBSCRIBE), {"topic": topic, "qid": qid})
            if attributes is not None:
                ex.run(
                    self.sql(SET_SUBSCRIPTION),
                    {"attributes": json.dumps(dict(attributes)), "topic": topic, "qid": qid},
                )

        self.store.write(run)

    def unsubscribe(self, topic: str, queue: str) -> None:
        def run(ex: Exec) -> None:
            self._topic(ex, topic)
            ex.run(self.sql(UNSUBSCRIBE), {"topic": topic, "queue": queue})

        self.store.write(run)

    def _subscribers(self, ex: Exec, topic: str) -> dict[str, dict[str, str]]:
        self._topic(ex, topic)
        rows = ex.rows(self.sql(SUBSCRIBERS), {"topic": topic})
        return {name: _strings(attributes) for name, attributes in rows}

    def subscriptions(self, topic: str) -> dict[str, dict[str, str]]:
        return self.store.read(lambda ex: self._subscribers(ex, topic))

    def update_subscription(
        self, topic: str, queue: str, changes: Mapping[str, str | None]
    ) -> dict[str, str]:
        def run(ex: Exec) -> dict[str, str]:
            self._topic(ex, topic)
            row = ex.one(self.sql(SUBSCRIPTION_LOCKED), {"topic": topic, "queue": queue})
            if row is None:
                raise not_subscribed(topic, queue)
            qid, current = row
            attributes = merge_settings(_strings(current), changes)
            ex.run(
                self.sql(SET_SUBSCRIPTION),
                {"attributes": json.dumps(attributes), "topic": topic, "qid": qid},
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

        def run(ex: Exec) -> float:
            old = ex.one(self.sql(CONSUMER_REGISTERED), {"id": consumer.id})
            before = now
            if old is not None:
                (before,) = old
            registered = consumer.registered_at or before
            ex.run(
                self.sql(REGISTER_CONSUMER),
                {
                    "id": consumer.id,
                    "queue_name": consumer.queue,
                    "info": json.dumps(dict(consumer.info)),
                    "timeout": consumer.timeout,
                    "registered_at": registered,
                    "heartbeat_at": now,
                },
            )
            return float(registered)

        registered = self.store.write(run)
        return dataclasses.replace(
            consumer, info=dict(consumer.info), registered_at=registered, heartbeat_at=now
        )

    def _prune(self, ex: Exec, now: float) -> None:
        """Live consumers drop the ones that missed their heartbeats."""
        ex.run(self.sql(PRUNE_CONSUMERS), {"now": now})

    def heartbeat(self, consumer_id: str) -> Consumer:
        now = self.store.clock.now()

        def run(ex: Exec) -> Consumer:
            self._prune(ex, now)
            ex.run(self.sql(CONSUMER_HEARTBEAT), {"now": now, "id": consumer_id})
            row = ex.one(self.sql(CONSUMER_ROW), {"id": consumer_id})
            if row is None:
                raise consumer_gone(consumer_id)
            return row_consumer(row)

        return self.store.write(run)

    def unregister_consumer(self, consumer_id: str) -> None:
        self.store.write(
            lambda ex: ex.run(self.sql(UNREGISTER_CONSUMER), {"id": consumer_id}),
            single=True,
        )

    def list_consumers(self, queue: str | None = None) -> list[Consumer]:
        now = self.store.clock.now()

        def run(ex: Exec) -> list[Consumer]:
            self._prune(ex, now)
            if queue is None:
                rows = ex.rows(self.sql(LIST_CONSUMERS))
            else:
                rows = ex.rows(self.sql(LIST_QUEUE_CONSUMERS), {"queue": queue})
            return [row_consumer(row) for row in rows]

        return self.store.write(run)


def _strings(text: str | None) -> dict[str, str]:
    """A JSON string map from its column (NULL: none)."""
    return {str(k): str(v) for k, v in json.loads(text).items()} if text else {}
