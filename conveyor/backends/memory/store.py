"""The in-memory store: every operation under one lock, on the data of `state.py`."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Mapping, Sequence

from ...clock import SYSTEM_CLOCK, Clock
from ...exceptions import (
    ConveyorError,
)
from ...models import (
    ArchivedMessage,
    Consumer,
    Message,
    MessageState,
    MessageUpdate,
    NewMessage,
    QueueAttributes,
    QueueInfo,
    QueueStats,
    SendResult,
)
from ...receipts import claim_token, parse_receipt, receipt_prefix, stale_receipt
from ..base import (
    QUEUE_FEATURES,
    Backend,
    Consumers,
    Editing,
    Inline,
    LoopCommits,
    Topics,
    merge_settings,
    routed,
)
from ..errors import (
    consumer_gone,
    in_flight,
    no_dead_letter_policy,
    no_dead_letter_queue,
    no_source,
    no_topic,
    not_subscribed,
    queue_exists,
)
from ..rules import GroupFill, claim_terms, claimed_until, expired, refill_tokens, tally
from .state import NAMED, NAMED_LOCK, QueueState, Rec, State, TopicState


class MemoryBackend(Backend, Editing, Topics, Consumers, LoopCommits):
    """The reference store (``memory://``, or ``memory://NAME`` to share one store between
    the clients of a process). Everything but sharing across processes and the pipeline."""

    scheme = "memory"
    features = QUEUE_FEATURES

    def __init__(self, *, name: str | None = None, clock: Clock = SYSTEM_CLOCK) -> None:
        super().__init__(clock=clock)
        if name:
            with NAMED_LOCK:
                state = NAMED.get(name)
                if state is None:
                    state = NAMED[name] = State(key=f"memory:{name}")
            self._s = state
        else:
            self._s = State()

    @classmethod
    def from_url(cls, rest: str, params: dict[str, str], *, clock: Clock) -> MemoryBackend:
        return cls(name=rest.strip("/") or None, clock=clock)

    @property
    def key(self) -> str:
        return self._s.key

    def inline(self) -> contextlib.AbstractContextManager[Inline]:
        """Every call is a few microseconds under a lock held as briefly: an event loop
        runs them on its own thread."""
        return contextlib.nullcontext(Inline())

    # -- queues ---------------------------------------------------------------------------

    def create_queue(self, name: str, attributes: QueueAttributes) -> tuple[QueueInfo, bool]:
        with self._s.lock:
            now = self.clock.now()
            q = self._s.queues.get(name)
            if q is not None:
                if q.attrs != attributes:
                    raise queue_exists(name)
                return q.info, False
            info = QueueInfo(name=name, attributes=attributes, created_at=now, updated_at=now)
            self._s.queues[name] = QueueState(
                info=info, tokens=attributes.rate_limit or 0, tokens_at=now
            )
            return info, True

    def delete_queue(self, name: str) -> None:
        with self._s.lock:
            self._s.queue(name)
            del self._s.queues[name]
            for topic in self._s.topics.values():
                topic.subscriptions.pop(name, None)

    def list_queues(self, prefix: str = "") -> list[str]:
        with self._s.lock:
            return sorted(n for n in self._s.queues if n.startswith(prefix))

    def get_queue(self, name: str) -> QueueInfo:
        with self._s.lock:
            return self._s.queue(name).info

    def set_queue_attributes(self, name: str, attributes: QueueAttributes) -> QueueInfo:
        with self._s.lock:
            q = self._s.queue(name)
            q.info = QueueInfo(
                name=name,
                attributes=attributes,
                created_at=q.info.created_at,
                updated_at=self.clock.now(),
            )
            return q.info

    def purge_queue(self, name: str) -> int:
        with self._s.lock:
            q = self._s.queue(name)
            n = len(q.messages)
            q.messages.clear()
            q.ready.clear()
            q.later.clear()
            q.dedup.clear()
            return n

    def queue_stats(self, name: str) -> QueueStats:
        with self._s.lock:
            now = self.clock.now()
            q = self._s.queue(name)
            q.sweep(now, force=True)
            counts = tally(
                ((r.visible_at, r.receive_count, r.sent_at) for r in q.messages.values()), now
            )
            return QueueStats(
                queue=name,
                ready=counts.ready,
                delayed=counts.delayed,
                in_flight=counts.in_flight,
                dead=q.dead,
                expired=q.expired,
                oldest_age=None if counts.oldest is None else max(0.0, now - counts.oldest),
                sent=q.sent,
                received=q.received,
                deleted=q.deleted,
            )

    # -- messages -------------------------------------------------------------------------

    def send(self, queue: str, messages: Sequence[NewMessage]) -> list[SendResult]:
        with self._s.lock:
            results = self._s.send(self._s.queue(queue), messages, self.clock.now())
        self.notify(queue)
        return results

    def send_bodies(self, queue: str, bodies: Sequence[bytes], delay: float) -> list[str]:
        if self._s.queue(queue).attrs.fifo:  # FIFO rules: the contract's default, `send`
            return super().send_bodies(queue, bodies, delay)
        with self._s.lock:
            ids = self._s.send_bodies(self._s.queue(queue), bodies, delay, self.clock.now())
        self.notify(queue)
        return ids

    def receive(self, queue: str, max_messages: int, visibility_timeout: float) -> list[Message]:
        with self._s.lock:
            # the clock is read under the lock: a send that ran just before this receive
            # took it scheduled its message by a time this receive must not precede
            now = self.clock.now()
            q = self._s.queue(queue)
            q.sweep(now)
            limit = max_messages
            rate = q.attrs.rate_limit
            if rate:
                q.tokens = refill_tokens(q.tokens, q.tokens_at, rate, now)
                q.tokens_at = now
                limit = min(limit, int(q.tokens))
                if limit <= 0:
                    return []
            token = claim_token(now)
            prefix = receipt_prefix(queue, token)
            terms = claim_terms(q.attrs, now, visibility_timeout)
            policy = q.attrs.dead_letter
            # claimed after the walk: a claim that ends at once (visibility timeout 0) puts
            # its message back among the ready ones, where the walk would find it again
            claimed: list[Rec] = []
            fill: GroupFill[str] | None = GroupFill(limit) if q.attrs.fifo else None
            moved = False
            for rec in q.candidates(now):
                if fill is not None:
                    fill.step(rec.visible_at, rec.receive_count)
                if expired(rec.sent_at, rec.deadline, terms.horizon, terms.expires):
                    q.drop(rec, "expired", now)
                    continue
                if (
                    policy is not None
                    and rec.receive_count >= policy.max_receive_count
                    and self._s.to_dlq(q, rec, now, None) is not None
                ):
                    moved = True
                    continue
                if fill is not None:
                    fill.add(rec.group_id, rec.id, rec.visible_at)
                    if fill.done:
                        break
                    continue
                claimed.append(rec)
                if len(claimed) >= limit:
                    break
            if fill is not None:
                claimed.extend(q.messages[mid] for mid in fill.chosen())
            visible_at = terms.visible_at
            out = [
                q.claim(
                    rec,
                    now,
                    visible_at if rec.deadline is None else claimed_until(terms, rec.deadline),
                    token,
                    prefix,
                )
                for rec in claimed
            ]
            q.received += len(out)
            if rate:
                q.tokens -= len(out)
        if moved and policy is not None:
            self.notify(policy.queue)
        return out

    def delete(self, queue: str, receipts: Sequence[str]) -> list[Exception | None]:
        return self._each_held(queue, receipts, lambda q, rec, now: q.drop(rec, "deleted", now))

    def change_visibility(
        self, queue: str, entries: Sequence[tuple[str, float]]
    ) -> list[Exception | None]:
        results: list[Exception | None] = []
        released = False
        with self._s.lock:
            now = self.clock.now()
            q = self._s.queue(queue)
            for receipt, timeout in entries:
                rec = self._held(q, receipt)
                if isinstance(rec, Rec):
                    rec.visible_at = now + timeout
                    rec.version += 1
                    q.schedule(rec, now)
                    released = released or timeout == 0
                    results.append(None)
                else:
                    results.append(rec)
        if released:
            self.notify(queue)
        return results

    def give_back(self, queue: str, receipts: Sequence[str]) -> list[Exception | None]:
        def back(q: QueueState, rec: Rec, now: float) -> None:
            rec.receive_count = max(0, rec.receive_count - 1)
            if not rec.receive_count:
                rec.first_received_at = None
            rec.visible_at = now
            q.touch(rec, now)  # its receipt holds it no more

        results = self._each_held(queue, receipts, back)
        if any(r is None for r in results):
            self.notify(queue)
        return results

    def _each_held(
        self, queue: str, receipts: Sequence[str], act: Callable[[QueueState, Rec, float], None]
    ) -> list[Exception | None]:
        """`act` on each record a receipt still holds, under the lock; per receipt, None or
        why it holds none."""
        results: list[Exception | None] = []
        with self._s.lock:
            now = self.clock.now()
            q = self._s.queue(queue)
            for receipt in receipts:
                rec = self._held(q, receipt)
                if isinstance(rec, Rec):
                    act(q, rec, now)
                    results.append(None)
                else:
                    results.append(rec)
        return results

    @staticmethod
    def _held(q: QueueState, receipt: str) -> Rec | ConveyorError:
        """The record a receipt still holds, or why it holds none."""
        try:
            _, mid, token = parse_receipt(q.name, receipt)
        except ConveyorError as exc:
            return exc
        rec = q.messages.get(mid)
        if rec is None or rec.token != token:
            return stale_receipt(mid)
        return rec

    # -- inspection and editing -----------------------------------------------------------

    def list_messages(
        self,
        queue: str,
        *,
        state: MessageState | None = None,
        limit: int = 100,
        after: int = 0,
    ) -> list[Message]:
        with self._s.lock:
            now = self.clock.now()
            q = self._s.queue(queue)
            out = []
            for rec in sorted(q.messages.values(), key=lambda r: r.order):
                if rec.order <= after:
                    continue
                view = q.view(rec)
                if state is None or view.state(now) is state:
                    out.append(view)
                    if len(out) >= limit:
                        break
            return out

    def get_message(self, queue: str, message_id: str) -> Message:
        with self._s.lock:
            q = self._s.queue(queue)
            return q.view(q.get(message_id))

    def update_message(self, queue: str, message_id: str, update: MessageUpdate) -> Message:
        with self._s.lock:
            now = self.clock.now()
            q = self._s.queue(queue)
            rec = q.get(message_id)
            if update.body is not None:
                rec.body = update.body
                rec.compressed = bool(update.compressed)
            if update.attributes is not None:
                rec.attributes = dict(update.attributes)
            if update.priority is not None and not q.attrs.fifo and update.priority != rec.priority:
                rec.priority = update.priority
                rec.seq = self._s.next_seq()  # the back of its new priority
                rec.token = None
            if update.visible_at is not None:
                rec.visible_at = update.visible_at
            rec.version += 1
            q.schedule(rec, now)
            view = q.view(rec)
        self.notify(queue)
        return view

    def remove_message(self, queue: str, message_id: str) -> None:
        with self._s.lock:
            q = self._s.queue(queue)
            q.drop(q.get(message_id), "removed", self.clock.now())

    def move_to_dlq(self, queue: str, message_id: str, error: str | None = None) -> Message:
        with self._s.lock:
            now = self.clock.now()
            q = self._s.queue(queue)
            rec = q.get(message_id)
            policy = q.attrs.dead_letter
            if policy is None:
                raise no_dead_letter_policy(queue)
            moved = self._s.to_dlq(q, rec, now, error)
            if moved is None:
                raise no_dead_letter_queue(policy.queue, queue)
            view = self._s.queue(policy.queue).view(moved)
        self.notify(policy.queue)
        return view

    def redrive(
        self,
        queue: str,
        *,
        ids: Sequence[str] | None = None,
        limit: int = 100,
        to: str | None = None,
    ) -> list[str]:
        touched: set[str] = set()
        with self._s.lock:
            now = self.clock.now()
            q = self._s.queue(queue)
            if ids is not None:
                recs = [q.get(mid) for mid in ids]
                for rec in recs:
                    if rec.visible_at > now and rec.receive_count:
                        raise in_flight(rec.id)
            else:
                ready = (r for r in q.messages.values() if r.visible_at <= now)
                recs = sorted(ready, key=lambda r: r.order)[:limit]
            for rec in recs:
                dest = to or rec.source_queue
                if dest is None:
                    raise no_source(rec.id)
                self._s.queue(dest)
            moved = []
            for rec in recs:
                dest_q = self._s.queue(to or rec.source_queue or "")
                self._s.move(q, rec, dest_q, now, dead_from=None)
                dest_q.sent += 1
                touched.add(dest_q.name)
                moved.append(rec.id)
        for name in touched:
            self.notify(name)
        return moved

    def reset_message(self, queue: str, message_id: str) -> Message:
        with self._s.lock:
            now = self.clock.now()
            q = self._s.queue(queue)
            rec = q.get(message_id)
            rec.receive_count = 0
            rec.first_received_at = None
            rec.visible_at = now
            q.touch(rec, now)
            view = q.view(rec)
        self.notify(queue)
        return view

    def fail_message(self, queue: str, message_id: str, delay: float = 0.0) -> Message:
        with self._s.lock:
            now = self.clock.now()
            q = self._s.queue(queue)
            rec = q.get(message_id)
            rec.visible_at = now + delay
            q.touch(rec, now)
            view = q.view(rec)
        if delay == 0:
            self.notify(queue)
        return view

    def list_archive(
        self, queue: str, *, limit: int = 1000, after: int = 0
    ) -> list[ArchivedMessage]:
        with self._s.lock:
            return list(self._s.queue(queue).archive[after : after + limit])

    # -- topics ---------------------------------------------------------------------------

    def _topic(self, name: str) -> TopicState:
        topic = self._s.topics.get(name)
        if topic is None:
            raise no_topic(name)
        return topic

    def create_topic(self, name: str) -> bool:
        with self._s.lock:
            if name in self._s.topics:
                return False
            self._s.topics[name] = TopicState()
            return True

    def delete_topic(self, name: str) -> None:
        with self._s.lock:
            self._topic(name)
            del self._s.topics[name]

    def list_topics(self, prefix: str = "") -> list[str]:
        with self._s.lock:
            return sorted(t for t in self._s.topics if t.startswith(prefix))

    def topic_settings(self, name: str) -> dict[str, str]:
        with self._s.lock:
            return dict(self._topic(name).settings)

    def update_topic_settings(self, name: str, changes: Mapping[str, str | None]) -> dict[str, str]:
        with self._s.lock:
            topic = self._topic(name)
            topic.settings = merge_settings(topic.settings, changes)
            return dict(topic.settings)

    def subscribe(
        self, topic: str, queue: str, attributes: Mapping[str, str] | None = None
    ) -> None:
        with self._s.lock:
            subs = self._topic(topic).subscriptions
            self._s.queue(queue)
            if attributes is not None or queue not in subs:
                subs[queue] = dict(attributes or {})

    def unsubscribe(self, topic: str, queue: str) -> None:
        with self._s.lock:
            self._topic(topic).subscriptions.pop(queue, None)

    def subscriptions(self, topic: str) -> dict[str, dict[str, str]]:
        with self._s.lock:
            subs = self._topic(topic).subscriptions
            return {name: dict(subs[name]) for name in sorted(subs)}

    def update_subscription(
        self, topic: str, queue: str, changes: Mapping[str, str | None]
    ) -> dict[str, str]:
        with self._s.lock:
            subs = self._topic(topic).subscriptions
            if queue not in subs:
                raise not_subscribed(topic, queue)
            subs[queue] = merge_settings(subs[queue], changes)
            return dict(subs[queue])

    def publish(
        self, topic: str, message: NewMessage | Mapping[str, NewMessage]
    ) -> dict[str, SendResult]:
        with self._s.lock:
            now = self.clock.now()
            copies = routed(sorted(self._topic(topic).subscriptions), message)
            out = {name: self._s.send(self._s.queue(name), [m], now)[0] for name, m in copies}
        for name in out:
            self.notify(name)
        return out

    # -- consumers ------------------------------------------------------------------------

    def register_consumer(self, consumer: Consumer) -> Consumer:
        with self._s.lock:
            now = self.clock.now()
            old = self._s.consumers.get(consumer.id)
            registered = consumer.registered_at or (old.registered_at if old else now)
            c = self._s.consumers[consumer.id] = dataclasses.replace(
                consumer, info=dict(consumer.info), registered_at=registered, heartbeat_at=now
            )
            return c

    def heartbeat(self, consumer_id: str) -> Consumer:
        with self._s.lock:
            now = self.clock.now()
            self._prune(now)
            c = self._s.consumers.get(consumer_id)
            if c is None:
                raise consumer_gone(consumer_id)
            c = self._s.consumers[c.id] = dataclasses.replace(c, heartbeat_at=now)
            return c

    def unregister_consumer(self, consumer_id: str) -> None:
        with self._s.lock:
            self._s.consumers.pop(consumer_id, None)

    def _prune(self, now: float) -> None:
        for cid in [c.id for c in self._s.consumers.values() if not c.alive(now)]:
            del self._s.consumers[cid]

    def list_consumers(self, queue: str | None = None) -> list[Consumer]:
        with self._s.lock:
            self._prune(self.clock.now())
            return sorted(
                (c for c in self._s.consumers.values() if queue is None or c.queue == queue),
                key=lambda c: (c.registered_at, c.id),
            )
