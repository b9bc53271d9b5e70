"""Topics and the consumer registry of the DynamoDB store: items in the store's table,
listed through DynamoMQ's index under `queue_type` `conveyor#topics` and
`conveyor#consumers`."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from ...models import Consumer, NewMessage, SendResult
from ..base import Consumers, Topics
from ..errors import consumer_gone, no_topic
from .items import CONSUMERS, TOPICS, consumer_item, consumer_of, s
from .table import ConditionFailed, Item, expr

if TYPE_CHECKING:
    from .store import DynamoStore


class DynamoRegistry(Topics, Consumers):
    """The store's topics and consumers (its `topics()` and `consumers()`)."""

    def __init__(self, store: DynamoStore) -> None:
        self.store = store

    def create_topic(self, name: str) -> bool:
        try:
            self.store.call(
                "put_item",
                Item={
                    "id": s(f"conveyor#topic#{name}"),
                    "queue_type": s(TOPICS),
                    "sent_at": s(name),
                },
                **expr(ConditionExpression="attribute_not_exists(#id)"),
            )
        except ConditionFailed:
            return False
        return True

    def _topic(self, name: str) -> Item:
        got = self.store.call(
            "get_item", Key={"id": s(f"conveyor#topic#{name}")}, ConsistentRead=True
        )
        if "Item" not in got:
            raise no_topic(name)
        item: Item = got["Item"]
        return item

    def delete_topic(self, name: str) -> None:
        try:
            self.store.call(
                "delete_item",
                Key={"id": s(f"conveyor#topic#{name}")},
                **expr(ConditionExpression="attribute_exists(#id)"),
            )
        except ConditionFailed:
            raise no_topic(name) from None

    def list_topics(self, prefix: str = "") -> list[str]:
        return sorted(item["sent_at"]["S"] for item in self.store.registry(TOPICS, prefix))

    def subscribe(self, topic: str, queue: str) -> None:
        self.store.queue_entry(queue, fresh=True)
        self._subscription(topic, queue, "ADD")

    def unsubscribe(self, topic: str, queue: str) -> None:
        self._subscription(topic, queue, "DELETE")

    def _subscription(self, topic: str, queue: str, verb: str) -> None:
        try:
            self.store.call(
                "update_item",
                Key={"id": s(f"conveyor#topic#{topic}")},
                ExpressionAttributeValues={":q": {"SS": [queue]}},
                **expr(
                    UpdateExpression=f"{verb} #subs :q",
                    ConditionExpression="attribute_exists(#id)",
                ),
            )
        except ConditionFailed:
            raise no_topic(topic) from None

    def topic_queues(self, topic: str) -> list[str]:
        return sorted(_subs(self._topic(topic)))

    def publish(self, topic: str, message: NewMessage) -> dict[str, SendResult]:
        return self.store.fan_out(sorted(_subs(self._topic(topic))), message)

    # -- consumers ------------------------------------------------------------------------

    def _consumer(self, consumer_id: str) -> Consumer | None:
        got = self.store.call(
            "get_item", Key={"id": s(f"conveyor#consumer#{consumer_id}")}, ConsistentRead=True
        )
        return consumer_of(got["Item"]) if "Item" in got else None

    def register_consumer(self, consumer: Consumer) -> Consumer:
        now = self.store.clock.now()
        old = self._consumer(consumer.id)
        registered = consumer.registered_at or (old.registered_at if old else now)
        c = dataclasses.replace(
            consumer, info=dict(consumer.info), registered_at=registered, heartbeat_at=now
        )
        self.store.call("put_item", Item=consumer_item(c))
        return c

    def heartbeat(self, consumer_id: str) -> Consumer:
        now = self.store.clock.now()
        c = self._consumer(consumer_id)
        if c is None or not c.alive(now):
            if c is not None:
                self.unregister_consumer(consumer_id)
            raise consumer_gone(consumer_id)
        c = dataclasses.replace(c, heartbeat_at=now)
        self.store.call("put_item", Item=consumer_item(c))
        return c

    def unregister_consumer(self, consumer_id: str) -> None:
        self.store.call("delete_item", Key={"id": s(f"conveyor#consumer#{consumer_id}")})

    def list_consumers(self, queue: str | None = None) -> list[Consumer]:
        now = self.store.clock.now()
        out: list[Consumer] = []
        for item in self.store.registry(CONSUMERS):
            c = consumer_of(item)
            if not c.alive(now):
                self.unregister_consumer(c.id)
            elif queue is None or c.queue == queue:
                out.append(c)
        return sorted(out, key=lambda c: (c.registered_at, c.id))

    def drop_subscriptions(self, queue: str) -> None:
        """Unsubscribe a deleted queue from every topic."""
        for topic in self.store.registry(TOPICS):
            if queue in _subs(topic):
                self.store.call(
                    "update_item",
                    Key={"id": topic["id"]},
                    ExpressionAttributeValues={":q": {"SS": [queue]}},
                    **expr(UpdateExpression="DELETE #subs :q"),
                )


def _subs(item: Item) -> list[str]:
    subs = item.get("subs")
    return list(subs["SS"]) if subs else []
