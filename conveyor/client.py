"""`Client`: the one way into every store. Validation, limits, long polling, compression."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

from .backends.base import Backend
from .clock import Clock
from .exceptions import InvalidInput
from .models import (
    Attributes,
    Capability,
    Consumer,
    NewMessage,
    QueueAttributes,
    QueueInfo,
    SendResult,
)
from .queues import Body, Queue, encode_body
from .urls import open_backend
from .validation import (
    check_body_size,
    check_message_attributes,
    check_priority,
    check_queue_name,
    check_topic_name,
    validate_attributes,
)


class Client:
    """Connects to a store by URL. Thread-safe; share one per process.

    ``Client("sqlite:///conveyor.db")``, ``Client("memory://")``, or ``Client(backend=...)``.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        backend: Backend | None = None,
        clock: Clock | None = None,
        attribute_cache: float = 1.0,
    ) -> None:
        if backend is None:
            backend = open_backend(url, clock=clock) if clock else open_backend(url)
        elif clock is not None:
            backend.clock = clock
        self.backend = backend
        self._cache_ttl = attribute_cache
        self._cache: dict[str, tuple[QueueInfo, float]] = {}
        self._cache_lock = threading.Lock()

    @property
    def clock(self) -> Clock:
        return self.backend.clock

    @property
    def capabilities(self) -> frozenset[Capability]:
        return self.backend.capabilities

    def close(self) -> None:
        self.backend.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- queues ---------------------------------------------------------------------------

    def queue(self, name: str) -> Queue:
        """A handle on an existing queue (nothing is checked until it is used)."""
        return Queue(self, check_queue_name(name))

    def create_queue(
        self, name: str, attributes: QueueAttributes | None = None, **options: Any
    ) -> Queue:
        """Create a queue, or return the existing one if its attributes are equal.

        Options are `QueueAttributes` fields; `fifo` defaults to whether the name ends in
        '.fifo'. Raises QueueExists if the queue exists with other attributes.
        """
        check_queue_name(name)
        attrs = attributes or QueueAttributes()
        if "fifo" not in options and attributes is None:
            options["fifo"] = name.endswith(".fifo")
        try:
            attrs = attrs.replace(**options)
        except TypeError as exc:
            raise InvalidInput(f"unknown queue attribute: {exc}") from None
        validate_attributes(name, attrs)
        info, _ = self.backend.create_queue(name, attrs)
        self._remember(info)
        return Queue(self, name)

    def delete_queue(self, name: str) -> None:
        self.backend.delete_queue(check_queue_name(name))
        self._forget(name)

    def list_queues(self, prefix: str = "") -> list[str]:
        return self.backend.list_queues(prefix)

    def queue_info(self, name: str, *, fresh: bool = False) -> QueueInfo:
        check_queue_name(name)
        return self._known_info(name, fresh=fresh)

    def _known_info(self, name: str, *, fresh: bool = False) -> QueueInfo:
        """A queue's info as read at most `attribute_cache` seconds ago, or now if `fresh`
        (`name` already checked)."""
        if not fresh:
            hit = self._cache.get(name)
            if hit is not None and time.monotonic() - hit[1] < self._cache_ttl:
                return hit[0]
        info = self.backend.get_queue(name)
        self._remember(info)
        return info

    def set_attributes(self, name: str, **changes: Any) -> QueueAttributes:
        current = self.queue_info(name, fresh=True).attributes
        try:
            attrs = current.replace(**changes)
        except TypeError as exc:
            raise InvalidInput(f"unknown queue attribute: {exc}") from None
        validate_attributes(name, attrs)
        info = self.backend.set_queue_attributes(name, attrs)
        self._remember(info)
        return info.attributes

    def _remember(self, info: QueueInfo) -> None:
        with self._cache_lock:
            self._cache[info.name] = (info, time.monotonic())

    def _forget(self, name: str) -> None:
        with self._cache_lock:
            self._cache.pop(name, None)

    # -- topics ---------------------------------------------------------------------------

    def create_topic(self, name: str) -> bool:
        self.backend.require(Capability.TOPICS, "topics")
        return self.backend.create_topic(check_topic_name(name))

    def delete_topic(self, name: str) -> None:
        self.backend.delete_topic(check_topic_name(name))

    def list_topics(self, prefix: str = "") -> list[str]:
        self.backend.require(Capability.TOPICS, "topics")
        return self.backend.list_topics(prefix)

    def subscribe(self, topic: str, queue: str) -> None:
        self.backend.subscribe(check_topic_name(topic), check_queue_name(queue))

    def unsubscribe(self, topic: str, queue: str) -> None:
        self.backend.unsubscribe(check_topic_name(topic), check_queue_name(queue))

    def topic_queues(self, topic: str) -> list[str]:
        return self.backend.topic_queues(check_topic_name(topic))

    def publish(
        self,
        topic: str,
        body: Body,
        *,
        attributes: Attributes | None = None,
        group_id: str | None = None,
        dedup_id: str | None = None,
        priority: int = 0,
    ) -> dict[str, SendResult]:
        """Send one message to every queue subscribed to `topic`, atomically where the store
        has transactions. Returns each queue's result (all copies share one id)."""
        self.backend.require(Capability.TOPICS, "topics")
        check_topic_name(topic)
        data = encode_body(body)
        attrs = dict(attributes or {})
        check_message_attributes(attrs)
        check_priority(priority)
        limit = min(
            (self.queue_info(q).attributes.max_message_bytes for q in self.topic_queues(topic)),
            default=1048576,
        )
        check_body_size(data, attrs, limit)
        message = NewMessage(
            id="",
            generated_id=True,
            body=data,
            attributes=attrs,
            group_id=group_id,
            dedup_id=dedup_id,
            priority=priority,
        )
        return self.backend.publish(topic, message)

    # -- consumers ------------------------------------------------------------------------

    def register_consumer(
        self,
        consumer_id: str | None = None,
        *,
        queue: str | None = None,
        timeout: float = 30.0,
        info: Mapping[str, Any] | None = None,
    ) -> Consumer:
        self.backend.require(Capability.CONSUMERS, "the consumer registry")
        if timeout <= 0:
            raise InvalidInput(f"consumer timeout must be positive, got {timeout!r}")
        return self.backend.register_consumer(
            Consumer(
                id=consumer_id or str(uuid.uuid4()),
                queue=queue,
                timeout=timeout,
                info=dict(info or {}),
            )
        )

    def heartbeat(self, consumer_id: str) -> Consumer:
        return self.backend.heartbeat(consumer_id)

    def unregister_consumer(self, consumer_id: str) -> None:
        self.backend.unregister_consumer(consumer_id)

    def list_consumers(self, queue: str | None = None) -> list[Consumer]:
        self.backend.require(Capability.CONSUMERS, "the consumer registry")
        return self.backend.list_consumers(queue)
