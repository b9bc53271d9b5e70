"""The Redis store's topics (settings, subscriptions, one-script fan-out) and consumer
registry (heartbeats, by the store's clock)."""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ...exceptions import OutcomeUnknown
from ...models import Consumer, NewMessage, SendResult
from ...validation import DEDUP_WINDOW
from ..base import Consumers, Topics, routed
from ..codec import encode_attributes
from ..errors import consumer_gone, no_queue, no_topic, not_subscribed
from ..rules import dedup
from .values import QueueEntry, decode_entry, num, pack_ext

if TYPE_CHECKING:
    from .store import RedisStore


class RedisRegistry(Topics, Consumers):
    """A Redis store's topics and consumers."""

    def __init__(self, store: RedisStore) -> None:
        self.store = store

    # -- topics ---------------------------------------------------------------------------

    def create_topic(self, name: str) -> bool:
        return bool(self.store.redis.registry("create_topic", name, num(self.store.clock.now())))

    def delete_topic(self, name: str) -> None:
        if not self.store.redis.registry("delete_topic", name):
            raise no_topic(name)

    def list_topics(self, prefix: str = "") -> list[str]:
        names = self.store.redis.run(
            lambda client: client.hkeys(f"{self.store.global_prefix}topics")
        )
        return sorted(n for n in (n.decode() for n in names) if n.startswith(prefix))

    def topic_settings(self, name: str) -> dict[str, str]:
        found = self.store.redis.registry("topic_settings", name)
        if found is None:
            raise no_topic(name)
        return _strings(found)

    def update_topic_settings(self, name: str, changes: Mapping[str, str | None]) -> dict[str, str]:
        found = self.store.redis.registry("update_topic", name, json.dumps(dict(changes)))
        if found == -1:
            raise no_topic(name)
        return _strings(found)

    def subscribe(
        self, topic: str, queue: str, attributes: Mapping[str, str] | None = None
    ) -> None:
        encoded = "" if attributes is None else json.dumps(dict(attributes))
        status = self.store.redis.registry("subscribe", topic, queue, encoded)
        if status == -1:
            raise no_topic(topic)
        if status == -2:
            raise no_queue(queue)

    def unsubscribe(self, topic: str, queue: str) -> None:
        if self.store.redis.registry("unsubscribe", topic, queue, "") == -1:
            raise no_topic(topic)

    def update_subscription(
        self, topic: str, queue: str, changes: Mapping[str, str | None]
    ) -> dict[str, str]:
        found = self.store.redis.registry(
            "update_subscription", topic, json.dumps(dict(changes)), queue
        )
        if found == -1:
            raise no_topic(topic)
        if found == -3:
            raise not_subscribed(topic, queue)
        return _strings(found)

    def _subscribers(self, topic: str) -> list[tuple[QueueEntry, dict[str, str]]]:
        flat = self.store.redis.registry("subscribers", topic)
        if flat is None:
            raise no_topic(topic)
        entries = [
            (decode_entry(self.store.prefix, flat[i].decode(), flat[i + 1]), _strings(flat[i + 2]))
            for i in range(0, len(flat), 3)
            if flat[i + 1] is not None
        ]
        return sorted(entries, key=lambda e: e[0].name)

    def subscriptions(self, topic: str) -> dict[str, dict[str, str]]:
        return {entry.name: attributes for entry, attributes in self._subscribers(topic)}

    def publish(
        self, topic: str, message: NewMessage | Mapping[str, NewMessage]
    ) -> dict[str, SendResult]:
        """One script per slot and copy the subscribed queues live in: atomic on one Redis
        for one copy, and per slot on a cluster (see docs/stores.md)."""
        subscribed = {entry.name: entry for entry, _ in self._subscribers(topic)}
        now = self.store.clock.now()
        groups: dict[tuple[str, int], list[tuple[QueueEntry, NewMessage]]] = {}
        for name, copy in routed(subscribed, message):
            entry = subscribed[name]
            slot = entry.tag if self.store.redis.cluster else ""
            groups.setdefault((slot, id(copy)), []).append((entry, copy))
        out: dict[str, SendResult] = {}
        for group in groups.values():
            copy = group[0][1]
            deadline = "" if copy.deadline is None else num(copy.deadline)
            args: list[Any] = [
                num(now),
                num(now + DEDUP_WINDOW),
                self.store.channel,
                copy.id,
                copy.body,
                pack_ext(encode_attributes(copy.attributes), deadline, compressed=copy.compressed),
                copy.group_id or "",
                deadline,
            ]
            for entry, _ in group:
                fifo = entry.attrs.fifo
                shown, key = dedup(copy, entry.attrs)
                args += (
                    entry.prefix,
                    entry.name,
                    key or "",
                    shown or "",
                    "0" if fifo else str(copy.priority),
                    num(now + copy.delay),
                )
            flat = self.store.redis.script(
                "publish",
                [f"{e.prefix}meta" for e, _ in group],
                args,
                functools.partial(_settle_copies, topic, group, copy.id),
            )
            for i, (entry, _) in enumerate(group):
                status, value = flat[2 * i], flat[2 * i + 1]
                if status == 1:
                    out[entry.name] = SendResult(id=copy.id)
                else:
                    original = value.decode()
                    duplicate = original != copy.id
                    out[entry.name] = SendResult(id=original, duplicate=duplicate)
        return out

    # -- consumers ------------------------------------------------------------------------

    @staticmethod
    def _ttl(timeout: float) -> int:
        """Real time a consumer's key outlives its last heartbeat (the registry prunes by the
        store's clock; the key's own expiry collects what nobody prunes)."""
        return math.ceil(timeout * 1000) + 1000

    def register_consumer(self, consumer: Consumer) -> Consumer:
        now = self.store.clock.now()
        registered = self.store.redis.registry(
            "register",
            consumer.id,
            consumer.queue or "",
            json.dumps(dict(consumer.info)),
            num(consumer.timeout),
            num(consumer.registered_at) if consumer.registered_at else "",
            num(now),
            num(now + consumer.timeout),
            self._ttl(consumer.timeout),
        )
        return Consumer(
            id=consumer.id,
            queue=consumer.queue,
            info=dict(consumer.info),
            timeout=consumer.timeout,
            registered_at=float(registered),
            heartbeat_at=now,
        )

    @staticmethod
    def _consumer(consumer_id: str, fields: Sequence[Any]) -> Consumer:
        queue, info, timeout, registered, heartbeat = fields
        return Consumer(
            id=consumer_id,
            queue=queue.decode() or None,
            info=json.loads(info),
            timeout=float(timeout),
            registered_at=float(registered),
            heartbeat_at=float(heartbeat),
        )

    def heartbeat(self, consumer_id: str) -> Consumer:
        fields = self.store.redis.registry("heartbeat", consumer_id, num(self.store.clock.now()))
        if fields is None:
            raise consumer_gone(consumer_id)
        return self._consumer(consumer_id, fields)

    def unregister_consumer(self, consumer_id: str) -> None:
        self.store.redis.registry("unregister", consumer_id)

    def list_consumers(self, queue: str | None = None) -> list[Consumer]:
        flat = self.store.redis.registry("consumers", num(self.store.clock.now()))
        consumers = [
            self._consumer(flat[i].decode(), flat[i + 1 : i + 6]) for i in range(0, len(flat), 6)
        ]
        return sorted(
            (c for c in consumers if queue is None or c.queue == queue),
            key=lambda c: (c.registered_at, c.id),
        )


def _strings(found: bytes | str | None) -> dict[str, str]:
    """A string map from its JSON ('' or nothing: none)."""
    if not found:
        return {}
    text = found.decode() if isinstance(found, bytes) else found
    return {str(k): str(v) for k, v in json.loads(text).items()}


def _settle_copies(
    topic: str, group: Sequence[tuple[QueueEntry, NewMessage]], message_id: str, client: Any
) -> list[Any]:
    """After a lost connection that may have published: the publish script's answer where
    every queue holds the copy, else OutcomeUnknown."""
    for entry, _ in group:
        if client.zscore(f"{entry.prefix}all", message_id) is None:
            raise OutcomeUnknown.of_publish(topic)
    return [v for _ in group for v in (0, message_id.encode())]
