"""Topics and the consumer registry of the DynamoDB store: items in the store's table,
listed through DynamoMQ's index under `queue_type` `conveyor#topics` and
`conveyor#consumers`."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ...models import Consumer, NewMessage, SendResult
from ..base import Consumers, Topics, merge_settings, routed
from ..errors import consumer_gone, no_topic, not_subscribed
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

    def topic_settings(self, name: str) -> dict[str, str]:
        return _strings(self._topic(name).get("settings"))

    def update_topic_settings(self, name: str, changes: Mapping[str, str | None]) -> dict[str, str]:
        return self._update(name, "settings", changes, None)

    def subscribe(
        self, topic: str, queue: str, attributes: Mapping[str, str] | None = None
    ) -> None:
        self.store.queue_entry(queue, fresh=True)
        self._subscription(topic, queue, "ADD")
        if attributes is not None:
            try:
                self.store.call(
                    "update_item",
                    Key={"id": s(f"conveyor#topic#{topic}")},
                    ExpressionAttributeValues={":v": s(json.dumps(dict(attributes)))},
                    **_with_name(
                        expr(
                            UpdateExpression="SET #a = :v",
                            ConditionExpression="attribute_exists(#id)",
                        ),
                        SUB + queue,
                    ),
                )
            except ConditionFailed:
                raise no_topic(topic) from None

    def unsubscribe(self, topic: str, queue: str) -> None:
        self._subscription(topic, queue, "DELETE")

    def _subscription(self, topic: str, queue: str, verb: str) -> None:
        remove = " REMOVE #a" if verb == "DELETE" else ""
        try:
            self.store.call(
                "update_item",
                Key={"id": s(f"conveyor#topic#{topic}")},
                ExpressionAttributeValues={":q": {"SS": [queue]}},
                **_with_name(
                    expr(
                        UpdateExpression=f"{verb} #subs :q{remove}",
                        ConditionExpression="attribute_exists(#id)",
                    ),
                    SUB + queue if remove else None,
                ),
            )
        except ConditionFailed:
            raise no_topic(topic) from None

    def subscriptions(self, topic: str) -> dict[str, dict[str, str]]:
        item = self._topic(topic)
        return {name: _strings(item.get(SUB + name)) for name in sorted(_subs(item))}

    def update_subscription(
        self, topic: str, queue: str, changes: Mapping[str, str | None]
    ) -> dict[str, str]:
        return self._update(topic, SUB + queue, changes, queue)

    def _update(
        self, topic: str, field: str, changes: Mapping[str, str | None], queue: str | None
    ) -> dict[str, str]:
        """Merge `changes` into the JSON map `field` of the topic's item: read, then write
        on the condition that nobody wrote it since (tried again if somebody did)."""
        while True:
            item = self._topic(topic)
            if queue is not None and queue not in _subs(item):
                raise not_subscribed(topic, queue)
            old = item.get(field)
            merged = merge_settings(_strings(old), changes)
            values: dict[str, Any] = {":v": s(json.dumps(merged))}
            condition = "attribute_exists(#id) AND "
            if old is None:
                condition += "attribute_not_exists(#a)"
            else:
                condition += "#a = :old"
                values[":old"] = old
            if queue is not None:
                condition += " AND contains(#subs, :q)"
                values[":q"] = s(queue)
            try:
                self.store.call(
                    "update_item",
                    Key={"id": s(f"conveyor#topic#{topic}")},
                    ExpressionAttributeValues=values,
                    **_with_name(
                        expr(UpdateExpression="SET #a = :v", ConditionExpression=condition),
                        field,
                    ),
                )
            except ConditionFailed:
                continue  # changed meanwhile (or gone: the next read says which)
            return merged

    def publish(
        self, topic: str, message: NewMessage | Mapping[str, NewMessage]
    ) -> dict[str, SendResult]:
        return self.store.fan_out(routed(sorted(_subs(self._topic(topic))), message))

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
                    **_with_name(expr(UpdateExpression="DELETE #subs :q REMOVE #a"), SUB + queue),
                )


def _subs(item: Item) -> list[str]:
    subs = item.get("subs")
    return list(subs["SS"]) if subs else []


SUB = "sub:"
"""The topic item's attribute holding a subscription's attributes: SUB + the queue's name."""


def _strings(value: Any) -> dict[str, str]:
    """A string map from the JSON of an item's attribute (absent: none)."""
    if not value:
        return {}
    return {str(k): str(v) for k, v in json.loads(value["S"]).items()}


def _with_name(parts: dict[str, Any], name: str | None) -> dict[str, Any]:
    """`parts` with `#a` naming the attribute `name` (which may hold any character)."""
    if name is not None:
        parts["ExpressionAttributeNames"] = {
            **parts.get("ExpressionAttributeNames", {}),
            "#a": name,
        }
    return parts
