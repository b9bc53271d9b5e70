"""`Catalog`: a store as the SDK's parts use it (`Client`, `Queue`, `Worker`).

It knows which contracts and features the store has, and refuses what it lacks with
`Unsupported` naming the store, before the store is called; it keeps each queue's info for
a moment (sends and receives read attributes on every call), and it creates, changes and
deletes queues and registers consumers with their input checked.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

from .backends.base import Backend, Consumers, Editing, Pipeline, Topics
from .clock import Clock
from .exceptions import InvalidInput, Unsupported
from .models import Capability, Consumer, Delivery, QueueAttributes, QueueInfo
from .validation import validate_attributes

# what a queue attribute needs of a store: (attribute set, feature, what it is called)
_NEEDS = (
    (lambda a: a.fifo, Capability.FIFO, "FIFO queues"),
    (
        lambda a: a.delivery is Delivery.AT_MOST_ONCE,
        Capability.AT_MOST_ONCE,
        "at-most-once delivery",
    ),
    (lambda a: a.archive, Capability.ARCHIVE, "archive"),
    (lambda a: bool(a.rate_limit), Capability.RATE_LIMIT, "rate limits"),
    (lambda a: a.compress_over is not None, Capability.COMPRESSION, "compression"),
)


class Catalog:
    """A store's queues, contracts and features. Thread-safe."""

    def __init__(self, backend: Backend, *, attribute_cache: float = 1.0) -> None:
        self.backend = backend
        self._ttl = attribute_cache
        self._cache: dict[str, tuple[QueueInfo, float]] = {}
        self._lock = threading.Lock()

    @property
    def clock(self) -> Clock:
        return self.backend.clock

    @property
    def capabilities(self) -> frozenset[Capability]:
        return self.backend.capabilities

    def unsupported(self, what: str) -> Unsupported:
        return Unsupported(
            f"the {self.backend.scheme or type(self.backend).__name__} store does not support"
            f" {what}: see the store table in docs/stores.md for one that does"
        )

    def require(self, capability: Capability, what: str) -> None:
        if capability not in self.backend.capabilities:
            raise self.unsupported(what)

    def editing(self, what: str) -> Editing:
        part = self.backend.editing()
        if part is None:
            raise self.unsupported(what)
        return part

    def topics(self) -> Topics:
        part = self.backend.topics()
        if part is None:
            raise self.unsupported("topics")
        return part

    def consumers(self) -> Consumers:
        part = self.backend.consumers()
        if part is None:
            raise self.unsupported("the consumer registry")
        return part

    def pipeline(self) -> Pipeline:
        part = self.backend.pipeline()
        if part is None:
            raise self.unsupported("parallel jobs (no bulk snapshots, leases or staged writes)")
        return part

    def check_attributes(self, name: str, attrs: QueueAttributes) -> QueueAttributes:
        """Validate a queue's attributes, and refuse those the store cannot honour."""
        validate_attributes(name, attrs)
        for needed, feature, what in _NEEDS:
            if needed(attrs) and feature not in self.backend.capabilities:
                raise self.unsupported(what)
        return attrs

    # -- queue info -----------------------------------------------------------------------

    def info(self, name: str, *, fresh: bool = False) -> QueueInfo:
        """A queue's info as read at most `attribute_cache` seconds ago, or now if `fresh`
        (`name` already checked)."""
        if not fresh:
            hit = self._cache.get(name)
            if hit is not None and time.monotonic() - hit[1] < self._ttl:
                return hit[0]
        info = self.backend.get_queue(name)
        self._remember(info)
        return info

    def _remember(self, info: QueueInfo) -> None:
        with self._lock:
            self._cache[info.name] = (info, time.monotonic())

    def forget(self, name: str) -> None:
        with self._lock:
            self._cache.pop(name, None)

    def create_queue(
        self, name: str, attributes: QueueAttributes | None, options: Mapping[str, Any]
    ) -> QueueInfo:
        changes = dict(options)
        if "fifo" not in changes and attributes is None:
            changes["fifo"] = name.endswith(".fifo")
        attrs = self._changed(attributes or QueueAttributes(), changes)
        info, _ = self.backend.create_queue(name, self.check_attributes(name, attrs))
        self._remember(info)
        return info

    def set_attributes(self, name: str, changes: Mapping[str, Any]) -> QueueAttributes:
        attrs = self._changed(self.info(name, fresh=True).attributes, changes)
        info = self.backend.set_queue_attributes(name, self.check_attributes(name, attrs))
        self._remember(info)
        return info.attributes

    @staticmethod
    def _changed(attrs: QueueAttributes, changes: Mapping[str, Any]) -> QueueAttributes:
        try:
            return attrs.replace(**changes)
        except TypeError as exc:
            raise InvalidInput(f"unknown queue attribute: {exc}") from None

    def delete_queue(self, name: str) -> None:
        try:
            self.backend.delete_queue(name)
        finally:
            self.forget(name)

    # -- consumers ------------------------------------------------------------------------

    def register_consumer(
        self,
        consumer_id: str | None = None,
        *,
        queue: str | None = None,
        timeout: float = 30.0,
        info: Mapping[str, Any] | None = None,
    ) -> Consumer:
        import uuid

        registry = self.consumers()
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            raise InvalidInput(f"consumer timeout must be a positive number, got {timeout!r}")
        return registry.register_consumer(
            Consumer(
                id=consumer_id or str(uuid.uuid4()),
                queue=queue,
                timeout=timeout,
                info=dict(info or {}),
            )
        )
