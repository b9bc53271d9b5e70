"""The in-memory store's inspection, in-place editing, topics and consumer registry."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..clock import Clock
from ..exceptions import (
    InvalidState,
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
    SendResult,
)
from .memory_state import QueueState, Rec, State


class MemoryAdmin:
    """Mixed into `MemoryBackend`; uses its state and helpers."""

    clock: Clock
    _s: State

    if TYPE_CHECKING:

        def _q(self, name: str) -> QueueState: ...
        def _get(self, q: QueueState, message_id: str) -> Rec: ...
        def _view(self, q: QueueState, rec: Rec, receipt: str | None = None) -> Message: ...
        def _drop(self, q: QueueState, rec: Rec, outcome: str, now: float) -> None: ...
        def _to_dlq(self, q: QueueState, rec: Rec, now: float, error: str | None) -> Rec | None: ...
        def _move(
            self,
            q: QueueState,
            rec: Rec,
            dest: QueueState,
            now: float,
            *,
            dead_from: str | None,
            error: str | None = None,
        ) -> Rec: ...
        def _touch(self, q: QueueState, rec: Rec, now: float) -> None: ...
        def _schedule(self, q: QueueState, rec: Rec, now: float) -> None: ...
        def _send_locked(
            self, q: QueueState, messages: Sequence[NewMessage], now: float
        ) -> list[SendResult]: ...
        def notify(self, queue: str) -> None: ...

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
        with self._s.lock:
            q = self._q(queue)
            out = []
            for rec in sorted(q.messages.values(), key=lambda r: r.seq):
                if rec.seq <= after:
                    continue
                view = self._view(q, rec)
                if state is None or view.state(now) is state:
                    out.append(view)
                    if len(out) >= limit:
                        break
            return out

    def get_message(self, queue: str, message_id: str) -> Message:
        with self._s.lock:
            q = self._q(queue)
            return self._view(q, self._get(q, message_id))

    def update_message(self, queue: str, message_id: str, update: MessageUpdate) -> Message:
        now = self.clock.now()
        with self._s.lock:
            q = self._q(queue)
            rec = self._get(q, message_id)
            if update.body is not None:
                rec.body = update.body
                rec.compressed = bool(update.compressed)
            if update.attributes is not None:
                rec.attributes = dict(update.attributes)
            if update.priority is not None and not q.attrs.fifo:
                rec.priority = update.priority
            if update.visible_at is not None:
                rec.visible_at = update.visible_at
            rec.version += 1
            self._schedule(q, rec, now)
            view = self._view(q, rec)
        self.notify(queue)
        return view

    def remove_message(self, queue: str, message_id: str) -> None:
        now = self.clock.now()
        with self._s.lock:
            q = self._q(queue)
            self._drop(q, self._get(q, message_id), "removed", now)

    def move_to_dlq(self, queue: str, message_id: str, error: str | None = None) -> Message:
        now = self.clock.now()
        with self._s.lock:
            q = self._q(queue)
            rec = self._get(q, message_id)
            policy = q.attrs.dead_letter
            if policy is None:
                raise InvalidState(
                    f"queue {queue!r} has no dead-letter queue: set its dead_letter policy first"
                )
            moved = self._to_dlq(q, rec, now, error)
            if moved is None:
                raise QueueDoesNotExist(
                    f"dead-letter queue {policy.queue!r} of {queue!r} does not exist: create it"
                )
            return self._view(self._q(policy.queue), moved)

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
        with self._s.lock:
            q = self._q(queue)
            if ids is not None:
                recs = [self._get(q, mid) for mid in ids]
                for rec in recs:
                    if rec.visible_at > now and rec.receive_count:
                        raise InvalidState(
                            f"message {rec.id!r} is in flight: wait for its visibility timeout"
                            " or delete it"
                        )
            else:
                recs = sorted(
                    (r for r in q.messages.values() if r.visible_at <= now), key=lambda r: r.seq
                )[:limit]
            for rec in recs:
                dest = to or rec.source_queue
                if dest is None:
                    raise InvalidState(
                        f"message {rec.id!r} has no source queue: name a destination with `to`"
                    )
                self._q(dest)
            moved = []
            for rec in recs:
                dest_q = self._q(to or rec.source_queue or "")
                self._move(q, rec, dest_q, now, dead_from=None)
                dest_q.sent += 1
                touched.add(dest_q.info.name)
                moved.append(rec.id)
        for name in touched:
            self.notify(name)
        return moved

    def reset_message(self, queue: str, message_id: str) -> Message:
        now = self.clock.now()
        with self._s.lock:
            q = self._q(queue)
            rec = self._get(q, message_id)
            rec.receive_count = 0
            rec.first_received_at = None
            rec.visible_at = now
            self._touch(q, rec, now)
            view = self._view(q, rec)
        self.notify(queue)
        return view

    def fail_message(self, queue: str, message_id: str, delay: float = 0.0) -> Message:
        now = self.clock.now()
        with self._s.lock:
            q = self._q(queue)
            rec = self._get(q, message_id)
            rec.visible_at = now + delay
            self._touch(q, rec, now)
            view = self._view(q, rec)
        if delay == 0:
            self.notify(queue)
        return view

    def list_archive(
        self, queue: str, *, limit: int = 1000, after: int = 0
    ) -> list[ArchivedMessage]:
        with self._s.lock:
            return list(self._q(queue).archive[after : after + limit])

    # -- topics ---------------------------------------------------------------------------

    def _topic(self, name: str) -> list[str]:
        subs = self._s.topics.get(name)
        if subs is None:
            raise TopicDoesNotExist(f"topic {name!r} does not exist: create it first")
        return subs

    def create_topic(self, name: str) -> bool:
        with self._s.lock:
            if name in self._s.topics:
                return False
            self._s.topics[name] = []
            return True

    def delete_topic(self, name: str) -> None:
        with self._s.lock:
            self._topic(name)
            del self._s.topics[name]

    def list_topics(self, prefix: str = "") -> list[str]:
        with self._s.lock:
            return sorted(t for t in self._s.topics if t.startswith(prefix))

    def subscribe(self, topic: str, queue: str) -> None:
        with self._s.lock:
            subs = self._topic(topic)
            self._q(queue)
            if queue not in subs:
                subs.append(queue)

    def unsubscribe(self, topic: str, queue: str) -> None:
        with self._s.lock:
            subs = self._topic(topic)
            if queue in subs:
                subs.remove(queue)

    def topic_queues(self, topic: str) -> list[str]:
        with self._s.lock:
            return sorted(self._topic(topic))

    def publish(self, topic: str, message: NewMessage) -> dict[str, SendResult]:
        now = self.clock.now()
        with self._s.lock:
            queues = sorted(self._topic(topic))
            out = {name: self._send_locked(self._q(name), [message], now)[0] for name in queues}
        for name in queues:
            self.notify(name)
        return out

    # -- consumers ------------------------------------------------------------------------

    def register_consumer(self, consumer: Consumer) -> Consumer:
        now = self.clock.now()
        with self._s.lock:
            old = self._s.consumers.get(consumer.id)
            registered = consumer.registered_at or (old.registered_at if old else now)
            c = Consumer(
                id=consumer.id,
                queue=consumer.queue,
                info=dict(consumer.info),
                timeout=consumer.timeout,
                registered_at=registered,
                heartbeat_at=now,
            )
            self._s.consumers[c.id] = c
            return c

    def heartbeat(self, consumer_id: str) -> Consumer:
        now = self.clock.now()
        with self._s.lock:
            self._prune(now)
            c = self._s.consumers.get(consumer_id)
            if c is None:
                raise NotFound(f"consumer {consumer_id!r} is not registered (it was pruned?)")
            c = Consumer(
                id=c.id,
                queue=c.queue,
                info=c.info,
                timeout=c.timeout,
                registered_at=c.registered_at,
                heartbeat_at=now,
            )
            self._s.consumers[c.id] = c
            return c

    def unregister_consumer(self, consumer_id: str) -> None:
        with self._s.lock:
            self._s.consumers.pop(consumer_id, None)

    def _prune(self, now: float) -> None:
        for cid in [c.id for c in self._s.consumers.values() if not c.alive(now)]:
            del self._s.consumers[cid]

    def list_consumers(self, queue: str | None = None) -> list[Consumer]:
        now = self.clock.now()
        with self._s.lock:
            self._prune(now)
            return sorted(
                (c for c in self._s.consumers.values() if queue is None or c.queue == queue),
                key=lambda c: (c.registered_at, c.id),
            )
