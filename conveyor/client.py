"""`Client`: the one way into every store. Validation, limits, long polling, compression."""

from __future__ import annotations

import builtins
import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from . import tracing
from .backends.base import Backend
from .catalog import Catalog
from .clock import Clock
from .exceptions import InvalidInput, InvalidName, QueueDoesNotExist
from .ids import new_id
from .models import (
    Attributes,
    Capability,
    Consumer,
    NewMessage,
    QueueAttributes,
    QueueInfo,
    SendResult,
)
from .pipeline import QueuePipeline
from .queues import Queue
from .sends import Body, SendEntry, encode_body, plain_message
from .urls import open_backend
from .validation import (
    INTERNAL_TOPICS,
    MAX_MESSAGE_ATTRIBUTES,
    MAX_MESSAGE_BYTES,
    NAMESPACE_RE,
    attribute_size,
    check_message_id,
    check_queue_name,
    check_topic_name,
)


class Client:
    """Connects to a store by URL. Thread-safe; share one per process.

    ``Client("sqlite:///conveyor.db")``, ``Client("memory://")``, or ``Client(backend=...)``.
    Nothing is opened until the first operation.
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
        self.catalog = Catalog(backend, attribute_cache=attribute_cache)

    @property
    def clock(self) -> Clock:
        return self.backend.clock

    @property
    def capabilities(self) -> frozenset[Capability]:
        return self.backend.capabilities

    def migrate(self) -> tuple[int, int] | None:
        """Create or upgrade the store's schema now; (old, new) version, or None for stores
        without one."""
        return self.backend.migrate()

    def close(self) -> None:
        self.backend.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- queues ---------------------------------------------------------------------------

    def queue(self, name: str) -> Queue:
        """A handle on an existing queue (nothing is checked until it is used)."""
        return Queue(self.catalog, check_queue_name(name))

    def create_queue(
        self, name: str, attributes: QueueAttributes | None = None, **options: Any
    ) -> Queue:
        """Create a queue, or return the existing one if its attributes are equal.

        Options are `QueueAttributes` fields; `fifo` defaults to whether the name ends in
        '.fifo'. Raises QueueExists if the queue exists with other attributes, Unsupported if
        the store cannot honour them.
        """
        self.catalog.create_queue(check_queue_name(name), attributes, options)
        return Queue(self.catalog, name)

    def delete_queue(self, name: str) -> None:
        self.catalog.delete_queue(check_queue_name(name))

    def list_queues(self, prefix: str = "") -> list[str]:
        return self.backend.list_queues(prefix)

    def find_queue(self, name: str) -> str:
        """The stored name of the queue called `name`: `name` itself when that queue exists,
        else the one queue of that name made through the SQS API in another region or account
        (stored as `REGION:ACCOUNT:NAME`). Raises QueueDoesNotExist when there is none, and
        InvalidName, naming them, when there are several."""
        check_queue_name(name)
        if name in self.list_queues(name):
            return name
        if NAMESPACE_RE.match(name) is None:
            found = [n for n in self.list_queues() if n.split(":")[-1] == name and ":" in n]
            if len(found) == 1:
                return found[0]
            if found:
                raise InvalidName(
                    f"there are queues called {name!r} in several regions or accounts:"
                    f" {', '.join(sorted(found))}; name one in full (REGION:ACCOUNT:NAME)"
                )
        raise QueueDoesNotExist(f"queue {name!r} does not exist: create it first")

    def queue_info(self, name: str, *, fresh: bool = False) -> QueueInfo:
        return self.catalog.info(check_queue_name(name), fresh=fresh)

    def set_attributes(self, name: str, **changes: Any) -> QueueAttributes:
        return self.catalog.set_attributes(check_queue_name(name), changes)

    def pipeline(self, queue: str) -> QueuePipeline:
        """Bulk access to a queue for parallel jobs (the Spark data source). Unsupported on
        stores without the pipeline contract."""
        return QueuePipeline(self.catalog.pipeline(), self.queue(queue))

    # -- topics ---------------------------------------------------------------------------

    def create_topic(self, name: str) -> bool:
        return self.catalog.topics().create_topic(check_topic_name(name))

    def delete_topic(self, name: str) -> None:
        self.catalog.topics().delete_topic(check_topic_name(name))

    def list_topics(self, prefix: str = "") -> list[str]:
        """Topic names starting with `prefix`; not the servers' own (`conveyor-internal-`)."""
        names = self.catalog.topics().list_topics(prefix)
        return [t for t in names if not t.startswith(INTERNAL_TOPICS)]

    def subscribe(
        self, topic: str, queue: str, attributes: Mapping[str, str] | None = None
    ) -> None:
        """Subscribe `queue` to `topic` (nothing if it is already); with `attributes`, they
        become the subscription's."""
        self.catalog.topics().subscribe(
            check_topic_name(topic), check_queue_name(queue), _strings(attributes)
        )

    def subscriptions(self, topic: str) -> dict[str, dict[str, str]]:
        """The queues subscribed to `topic`, each with its subscription's attributes."""
        return self.catalog.topics().subscriptions(check_topic_name(topic))

    def update_subscription(
        self, topic: str, queue: str, changes: Mapping[str, str | None]
    ) -> dict[str, str]:
        """Set (None: remove) attributes of a subscription; returns all of them."""
        return self.catalog.topics().update_subscription(
            check_topic_name(topic), check_queue_name(queue), _changes(changes)
        )

    def topic_settings(self, topic: str) -> dict[str, str]:
        return self.catalog.topics().topic_settings(check_topic_name(topic))

    def update_topic_settings(
        self, topic: str, changes: Mapping[str, str | None]
    ) -> dict[str, str]:
        """Set (None: remove) settings of a topic; returns all of them."""
        return self.catalog.topics().update_topic_settings(
            check_topic_name(topic), _changes(changes)
        )

    def unsubscribe(self, topic: str, queue: str) -> None:
        self.catalog.topics().unsubscribe(check_topic_name(topic), check_queue_name(queue))

    def topic_queues(self, topic: str) -> list[str]:
        return self.catalog.topics().topic_queues(check_topic_name(topic))

    @tracing.store_call("publish", topic=True)
    def publish(
        self,
        topic: str,
        body: Body,
        *,
        attributes: Attributes | None = None,
        group_id: str | None = None,
        dedup_id: str | None = None,
        priority: int = 0,
        id: str | None = None,
    ) -> dict[str, SendResult]:
        """Send one message to every queue subscribed to `topic`, atomically where the store
        has transactions. Returns each queue's result; every copy carries one id.

        The message is checked against every subscribed queue as a send to it would be (its
        size, a FIFO queue's group and de-duplication id): if one would refuse it, none
        gets it. With `id` every copy carries that id, and a queue that holds a message with
        it already reports a duplicate.
        """
        topics = self.catalog.topics()
        entry = SendEntry(
            entry_id="0",
            body=body,
            id=new_id() if id is None else check_message_id(id),
            group_id=group_id,
            dedup_id=dedup_id,
            priority=priority,
            attributes=dict(attributes or {}),
        )
        names = topics.topic_queues(check_topic_name(topic))
        if tracing.active() is not None:
            entry = self._traced(entry, names)
        message = plain_message(entry)
        for name in names:
            self.queue(name).sending([entry])  # refused here as a send to that queue would be
        return topics.publish(topic, message)

    def _traced(self, entry: SendEntry, queues: Iterable[str]) -> SendEntry:
        """`entry` with the current span's trace context among its attributes, where it
        fits in every one of `queues` (tracing.py)."""
        limit = min(
            (self.queue(q).info.attributes.max_message_bytes for q in queues),
            default=MAX_MESSAGE_BYTES,
        )
        attributes = dict(entry.attributes or {})
        body = entry.body if isinstance(entry.body, bytes) else encode_body(entry.body)
        budget = limit - len(body) - attribute_size(attributes)
        traced = tracing.with_context(attributes, MAX_MESSAGE_ATTRIBUTES - len(attributes), budget)
        return entry if traced is attributes else dataclasses.replace(entry, attributes=traced)

    @tracing.store_call("publish", topic=True)
    def publish_copies(
        self, topic: str, copies: Mapping[str, SendEntry], *, id: str | None = None
    ) -> dict[str, SendResult]:
        """Publish a copy of its own to each subscribed queue `copies` names (the others get
        nothing), atomically where the store has transactions. A copy whose entry has an
        `id` carries it; the others carry one id between them (`id`, or one made here).
        A copy is checked as a send to its queue would be: if one is refused, none is sent.
        Entries that are the same object are stored as one copy."""
        topics = self.catalog.topics()
        mid = new_id() if id is None else check_message_id(id)
        built: dict[int, NewMessage] = {}
        messages: dict[str, NewMessage] = {}
        if tracing.active() is not None:
            users: dict[int, list[str]] = {}
            for name, entry in copies.items():
                users.setdefault(builtins.id(entry), []).append(name)
            traced = {k: self._traced(copies[names[0]], names) for k, names in users.items()}
            copies = {name: traced[builtins.id(entry)] for name, entry in copies.items()}
        for name, entry in copies.items():
            self.queue(name).check(entry)
            key = builtins.id(entry)
            if key not in built:
                own = entry if entry.id is not None else dataclasses.replace(entry, id=mid)
                built[key] = plain_message(own)
            messages[name] = built[key]
        return topics.publish(check_topic_name(topic), messages)

    # -- consumers ------------------------------------------------------------------------

    def register_consumer(
        self,
        consumer_id: str | None = None,
        *,
        queue: str | None = None,
        timeout: float = 30.0,
        info: Mapping[str, Any] | None = None,
    ) -> Consumer:
        return self.catalog.register_consumer(consumer_id, queue=queue, timeout=timeout, info=info)

    def heartbeat(self, consumer_id: str) -> Consumer:
        return self.catalog.consumers().heartbeat(consumer_id)

    def unregister_consumer(self, consumer_id: str) -> None:
        self.catalog.consumers().unregister_consumer(consumer_id)

    def list_consumers(self, queue: str | None = None) -> list[Consumer]:
        return self.catalog.consumers().list_consumers(queue)


def _strings(values: Mapping[str, str] | None) -> dict[str, str] | None:
    if values is None:
        return None
    for key, value in values.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise InvalidInput(f"attribute {key!r}: names and values must be strings")
    return dict(values)


def _changes(changes: Mapping[str, str | None]) -> dict[str, str | None]:
    for key, value in changes.items():
        if not isinstance(key, str) or not (value is None or isinstance(value, str)):
            raise InvalidInput(f"setting {key!r}: names must be strings, values strings or None")
    return dict(changes)
