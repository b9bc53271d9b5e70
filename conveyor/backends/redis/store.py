"""The Redis store: every operation that touches more than one key is one Lua script
(`lua/`), so a claim, a delete, a move to the dead-letter queue or a fan-out is atomic
against every other client; the keys of one queue share a hash tag, so each script runs on
one Redis Cluster slot."""

from __future__ import annotations

import functools
import json
import math
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

from ...clock import Clock
from ...exceptions import ConveyorError, OutcomeUnknown
from ...ids import new_ids
from ...models import (
    ArchivedMessage,
    Capability,
    Consumer,
    Message,
    MessageState,
    MessageUpdate,
    NewMessage,
    QueueAttributes,
    QueueInfo,
    QueueStats,
    SendResult,
    sent_result,
)
from ...notify import HUB
from ...receipts import claim_token, parse_receipt, receipt_prefix, stale_receipt
from ...validation import DEDUP_WINDOW
from ..base import QUEUE_FEATURES, Backend, Consumers, Editing, Topics, routed
from ..codec import encode_attributes
from ..errors import (
    consumer_gone,
    in_flight,
    no_dead_letter_policy,
    no_dead_letter_queue,
    no_message,
    no_queue,
    no_source,
    no_topic,
    not_subscribed,
    queue_exists,
)
from ..rules import (
    SWEEP_INTERVAL,
    SWEEP_ROWS,
    bare_bodies,
    claim_terms,
    deadline_rules,
    dedup,
)
from .connection import RedisConnection
from .layout import LAYOUT
from .values import (
    ARCHIVE_FIELDS,
    BAND,
    QueueEntry,
    archived,
    decode_entry,
    message,
    messages,
    num,
    pack_ext,
    pack_message,
    queue_prefix,
)

# how long a queue's registry entry is trusted before it is read again (by the store's clock)
QUEUE_CACHE_SECONDS = 1.0


class RedisStore(Backend, Editing, Topics, Consumers):
    scheme = "redis"
    features = QUEUE_FEATURES | {Capability.CROSS_PROCESS}

    def __init__(
        self,
        url: str,
        *,
        display: str,
        prefix: str,
        clock: Clock,
        reconnect_timeout: float = 60.0,
        poll_interval: float = 1.0,
    ) -> None:
        super().__init__(clock=clock)
        self.display = display
        self.prefix = prefix
        self._poll_interval = poll_interval
        self._global = f"{{{prefix}}}:"
        self.channel = f"{prefix}:wake"
        self.redis = RedisConnection(
            url,
            display=display,
            prefix=prefix,
            registry=self._global,
            channel=self.channel,
            reconnect_timeout=reconnect_timeout,
        )
        self._entries: dict[str, tuple[float, QueueEntry]] = {}
        self._swept: dict[str, float] = {}
        self._next_visible: dict[str, float] = {}

    @property
    def key(self) -> str:
        return f"redis:{self.display}#{self.prefix}"

    def close(self) -> None:
        self.redis.close()

    def migrate(self) -> tuple[int, int] | None:
        """Connect, upgrading keys of an earlier layout (layout.py); (old, new) layout."""
        self.redis.client()
        return self.redis.layout_found, int(LAYOUT)

    def _script(self, name: str, entry: QueueEntry, args: Sequence[Any]) -> Any:
        """Run a script of one queue (routed by its meta key)."""
        return self.redis.script(name, [entry.meta], args)

    @property
    def poll_interval(self) -> float:
        # sends wake waiters through a channel, and a waiter knows when the next invisible
        # message becomes visible: polling is only a safety net
        return self._poll_interval

    # -- queue entries --------------------------------------------------------------------

    def _entry(self, name: str, *, fresh: bool = False) -> QueueEntry:
        """The queue's registry entry, as read at most QUEUE_CACHE_SECONDS ago."""
        hit = self._entries.get(name)
        now = self.clock.now()
        if hit is not None and not fresh:
            read_at, entry = hit
            if 0.0 <= now - read_at < QUEUE_CACHE_SECONDS:
                return entry
        text = self.redis.run(lambda client: client.hget(f"{self._global}queues", name))
        if text is None:
            self._entries.pop(name, None)
            raise no_queue(name)
        entry = decode_entry(self.prefix, name, text)
        self._entries[name] = (now, entry)
        return entry

    def _maybe(self, name: str) -> QueueEntry | None:
        try:
            return self._entry(name)
        except ConveyorError:
            return None

    # -- queues ---------------------------------------------------------------------------

    def create_queue(self, name: str, attributes: QueueAttributes) -> tuple[QueueInfo, bool]:
        now = self.clock.now()
        tag = name
        policy = attributes.dead_letter
        dlq = self._maybe(policy.queue) if policy is not None else None
        if dlq is not None:
            tag = dlq.tag  # next to its dead-letter queue: moves there are atomic on a cluster
        qid = secrets.token_hex(4)
        entry = QueueEntry(
            name, tag, qid, attributes, now, now, queue_prefix(self.prefix, name, tag, qid)
        )
        existing = self.redis.registry("create_queue", name, entry.encode())
        if existing is None:
            self._entries[name] = (now, entry)
            return entry.info(), True
        old = decode_entry(self.prefix, name, existing)
        if old.attrs != attributes:
            raise queue_exists(name)
        return old.info(), False

    def delete_queue(self, name: str) -> None:
        text = self.redis.registry("delete_queue", name)
        self._entries.pop(name, None)
        if text is None:
            raise no_queue(name)
        entry = decode_entry(self.prefix, name, text)
        while True:
            _, left = self._script("clear", entry, [entry.prefix, 1000, "1"])
            if not left:
                return

    def list_queues(self, prefix: str = "") -> list[str]:
        names = self.redis.run(lambda client: client.hkeys(f"{self._global}queues"))
        return sorted(n for n in (n.decode() for n in names) if n.startswith(prefix))

    def get_queue(self, name: str) -> QueueInfo:
        return self._entry(name, fresh=True).info()

    def set_queue_attributes(self, name: str, attributes: QueueAttributes) -> QueueInfo:
        old = self._entry(name, fresh=True)
        entry = old._replace(attrs=attributes, updated_at=self.clock.now())
        if not self.redis.registry("set_queue", name, entry.encode()):
            self._entries.pop(name, None)
            raise no_queue(name)
        self._entries[name] = (self.clock.now(), entry)
        return entry.info()

    def purge_queue(self, name: str) -> int:
        entry = self._entry(name)
        gone = 0
        while True:
            n, left = self._script("clear", entry, [entry.prefix, 1000, "0"])
            gone += int(n)
            if not left:
                return gone

    def _sweep(self, entry: QueueEntry, now: float, whole: bool = False) -> None:
        """Expire what is past retention or deadline: a bounded sweep once a minute per
        queue and process, and all of it before stats."""
        if not whole and now - self._swept.get(entry.prefix, -1e18) < SWEEP_INTERVAL:
            return
        self._swept[entry.prefix] = now
        args = [
            entry.prefix,
            entry.name,
            num(now),
            num(now - entry.attrs.retention),
            "1" if entry.attrs.archive else "0",
            SWEEP_ROWS,
            num(deadline_rules(entry.attrs, now)[0]),
        ]
        while self._script("sweep", entry, args) >= SWEEP_ROWS and whole:
            pass

    def queue_stats(self, name: str) -> QueueStats:
        entry = self._entry(name)
        now = self.clock.now()
        self._sweep(entry, now, whole=True)
        ready, delayed, flying, oldest, sent, received, deleted, dead, expired = self._script(
            "stats", entry, [entry.prefix, num(now)]
        )
        return QueueStats(
            queue=name,
            ready=int(ready),
            delayed=int(delayed),
            in_flight=int(flying),
            dead=int(dead),
            expired=int(expired),
            oldest_age=None if oldest is None else max(0.0, now - float(oldest)),
            sent=int(sent),
            received=int(received),
            deleted=int(deleted),
        )

    # -- messages -------------------------------------------------------------------------

    def send(self, queue: str, messages: Sequence[NewMessage]) -> list[SendResult]:
        entry = self._entry(queue)
        attrs = entry.attrs
        now = self.clock.now()
        now_text = num(now)
        fifo = attrs.fifo
        mine = [m.generated_id or not m.id for m in messages]
        fresh = iter(new_ids(sum(mine)))
        args: list[Any] = [entry.prefix, queue, now_text, num(now + DEDUP_WINDOW), self.channel]
        ids: list[str] = []
        if not fifo and bare_bodies(messages):
            first = messages[0]
            visible = num(now + first.delay)
            args += ("bare", str(first.priority), visible)
            head = pack_message(now_text, visible, "", "", "", b"")
            for m, own in zip(messages, mine, strict=True):
                message_id = next(fresh) if own else m.id
                ids.append(message_id)
                args += (message_id, head + m.body)
            return self._sent(entry, ids, mine, self._send(entry, ids, args))
        args.append("full")
        for m, own in zip(messages, mine, strict=True):
            message_id = next(fresh) if own else m.id
            ids.append(message_id)
            shown, key = dedup(m, attrs)
            visible = num(now + m.delay)
            deadline = "" if m.deadline is None else num(m.deadline)
            ext = pack_ext(encode_attributes(m.attributes), deadline, compressed=m.compressed)
            args += (
                message_id,
                pack_message(now_text, visible, m.group_id or "", shown or "", ext, m.body),
                key or "",
                "0" if fifo else str(m.priority),
                deadline,
                visible,
            )
        return self._sent(entry, ids, mine, self._send(entry, ids, args))

    def _send(self, entry: QueueEntry, ids: Sequence[str], args: Sequence[Any]) -> Any:
        """The send script's answer; after a lost connection that may have stored the
        messages, the same answer where they are all there, else OutcomeUnknown (what
        it stored may have been received and deleted since)."""

        def settle(client: Any) -> list[Any]:
            if None in client.zmscore(f"{entry.prefix}all", ids):
                raise OutcomeUnknown.of_send(entry.name, len(ids))
            return [v for i in ids for v in (0, i.encode())]

        return self.redis.script("send", [entry.meta], args, settle)

    @staticmethod
    def _sent(
        entry: QueueEntry, ids: Sequence[str], mine: Sequence[bool], out: Sequence[Any]
    ) -> list[SendResult]:
        """A send's results from its script's answer."""
        fifo = entry.attrs.fifo
        results: list[SendResult] = []
        for i, (message_id, own) in enumerate(zip(ids, mine, strict=True)):
            status, value = out[2 * i], out[2 * i + 1]
            if status == 1:
                if fifo:
                    results.append(SendResult(id=message_id, sequence=32767 * BAND + int(value)))
                else:
                    results.append(sent_result(message_id))
                continue
            original = value.decode()
            if own and original == message_id:  # stored by an attempt whose answer was lost
                results.append(sent_result(message_id))
            else:
                results.append(SendResult(id=original, duplicate=True))
        return results

    def _dead_letter_target(self, entry: QueueEntry) -> QueueEntry | None:
        policy = entry.attrs.dead_letter
        return None if policy is None else self._maybe(policy.queue)

    def _same_slot(self, a: QueueEntry, b: QueueEntry) -> bool:
        return not self.redis.cluster or a.tag == b.tag

    def receive(self, queue: str, max_messages: int, visibility_timeout: float) -> list[Message]:
        entry = self._entry(queue)
        attrs = entry.attrs
        now = self.clock.now()
        self._sweep(entry, now)
        terms = claim_terms(attrs, now, visibility_timeout)
        token = claim_token(now)
        policy = attrs.dead_letter
        dlq = self._dead_letter_target(entry)
        inside = dlq is not None and self._same_slot(entry, dlq)
        claimed, next_visible, outbox = self._script(
            "claim",
            entry,
            [
                entry.prefix,
                queue,
                num(now),
                max_messages,
                num(terms.visible_at),
                token,
                num(terms.horizon),
                "1" if attrs.fifo else "0",
                policy.max_receive_count if policy is not None and dlq is not None else 0,
                dlq.prefix if dlq is not None and inside else "",
                policy.queue if policy is not None else "",
                "1" if attrs.archive else "0",
                num(attrs.rate_limit or 0),
                self.channel,
                num(terms.expires),
                num(terms.cut_from),
            ],
        )
        if outbox and dlq is not None:
            for message_id in outbox:
                self._move_across(entry, message_id.decode(), dlq, dead=True, error=None)
        if not claimed:
            self._next_visible[queue] = float(next_visible) if next_visible else math.inf
            return []
        return messages(queue, claimed, receipt_prefix(queue, token))

    def delete(self, queue: str, receipts: Sequence[str]) -> list[Exception | None]:
        entry = self._entry(queue)
        head = [entry.prefix, queue, num(self.clock.now()), "1" if entry.attrs.archive else "0"]
        return self._by_receipt("delete", entry, head, [(r, ()) for r in receipts])

    def change_visibility(
        self, queue: str, entries: Sequence[tuple[str, float]]
    ) -> list[Exception | None]:
        entry = self._entry(queue)
        now = self.clock.now()
        head = [entry.prefix, queue, num(now), self.channel]
        return self._by_receipt(
            "visibility", entry, head, [(r, (num(now + t),)) for r, t in entries]
        )

    def _by_receipt(
        self,
        script: str,
        entry: QueueEntry,
        head: list[Any],
        items: Sequence[tuple[str, tuple[Any, ...]]],
    ) -> list[Exception | None]:
        """Run `script` once for every well-formed receipt: its arguments are `head`, then
        per receipt (message id, token, *extra); per item, None or why it was refused."""
        results: list[Exception | None] = []
        args = list(head)
        held: list[tuple[int, str]] = []  # (index in results, message id)
        for receipt, extra in items:
            try:
                _, message_id, token = parse_receipt(entry.name, receipt)
            except ConveyorError as exc:
                results.append(exc)
                continue
            held.append((len(results), message_id))
            results.append(None)
            args += (message_id, token, *extra)
        if held:
            for (index, message_id), done in zip(
                held, self._script(script, entry, args), strict=True
            ):
                if not done:
                    results[index] = stale_receipt(message_id)
        return results

    # -- waiting --------------------------------------------------------------------------

    def _until(self, queue: str, timeout: float) -> float:
        """How long to wait: until the queue's next invisible message becomes visible (as
        its last empty receive saw it), at most `timeout`."""
        soon = self._next_visible.get(queue, math.inf) - self.clock.now()
        return min(timeout, soon + 0.001) if soon > 0 else timeout

    def wait_for_messages(self, queue: str, since: int, timeout: float) -> None:
        if self.clock.manual:
            self.clock.sleep(timeout)
            return
        self.redis.listen(self.key)
        HUB.wait(self.key, queue, since, self._until(queue, timeout))

    async def wait_for_messages_async(self, queue: str, since: int, timeout: float) -> None:
        if self.clock.manual:
            self.clock.sleep(min(timeout, self.poll_interval))
            return
        self.redis.listen(self.key)
        await HUB.wait_async(
            self.key, queue, since, self._until(queue, timeout), self.poll_interval
        )

    # -- reading messages -----------------------------------------------------------------

    def _fetch(self, entry: QueueEntry, message_id: str) -> Message:
        found = self._script("peek", entry, [entry.prefix, "", message_id])
        if not found:
            raise no_message(entry.name, message_id)
        return message(entry.name, *found)

    def list_messages(
        self,
        queue: str,
        *,
        state: MessageState | None = None,
        limit: int = 100,
        after: int = 0,
    ) -> list[Message]:
        entry = self._entry(queue)
        found = self._script(
            "peek",
            entry,
            [entry.prefix, num(self.clock.now()), str(after), limit, state.value if state else ""],
        )
        return messages(queue, found)

    def get_message(self, queue: str, message_id: str) -> Message:
        return self._fetch(self._entry(queue), message_id)

    # -- editing --------------------------------------------------------------------------

    def _edit(self, entry: QueueEntry, op: str, message_id: str, *args: Any) -> Any:
        out = self._script(
            "edit",
            entry,
            [entry.prefix, entry.name, num(self.clock.now()), self.channel, op, message_id, *args],
        )
        if out is None:
            raise no_message(entry.name, message_id)
        return out

    def update_message(self, queue: str, message_id: str, update: MessageUpdate) -> Message:
        entry = self._entry(queue)
        priority = update.priority if not entry.attrs.fifo else None
        values = self._edit(
            entry,
            "update",
            message_id,
            update.body if update.body is not None else "",
            "1" if update.compressed else "0",
            (encode_attributes(update.attributes) or "") if update.attributes is not None else "",
            str(priority) if priority is not None else "",
            num(update.visible_at) if update.visible_at is not None else "",
            "1" if update.body is not None else "0",
            "1" if update.attributes is not None else "0",
            "1" if priority is not None else "0",
            "1" if update.visible_at is not None else "0",
        )
        return message(queue, *values)

    def remove_message(self, queue: str, message_id: str) -> None:
        entry = self._entry(queue)
        self._edit(entry, "remove", message_id, "1" if entry.attrs.archive else "0")

    def reset_message(self, queue: str, message_id: str) -> Message:
        return message(queue, *self._edit(self._entry(queue), "reset", message_id))

    def fail_message(self, queue: str, message_id: str, delay: float = 0.0) -> Message:
        visible = num(self.clock.now() + delay)
        return message(queue, *self._edit(self._entry(queue), "fail", message_id, visible))

    def _move_across(
        self, src: QueueEntry, message_id: str, dest: QueueEntry, *, dead: bool, error: str | None
    ) -> int:
        """Move a message between queues in different slots of a cluster: write it into the
        destination, then take it out of the source. A crash between the two leaves it in
        both (never in neither): at least once."""
        m = self._fetch(src, message_id)
        now = num(self.clock.now())
        sent = num(m.sent_at) if dead else now
        deadline = "" if m.deadline is None else num(m.deadline)
        ext = pack_ext(
            encode_attributes(m.attributes),
            deadline,
            src.name if dead else None,
            (error if error is not None else m.error) if dead else None,
            m.compressed,
        )
        blob = pack_message(sent, now, m.group_id or "", m.dedup_id or "", ext, m.body)
        seq = self._script(
            "put",
            dest,
            [
                dest.prefix,
                dest.name,
                now,
                self.channel,
                "0" if dead else "1",
                m.id,
                blob,
                str(m.priority),
                deadline,
                sent,
            ],
        )
        self._edit(src, "moved", message_id, "dead" if dead else "")
        return int(seq)

    def _move(
        self,
        src: QueueEntry,
        dest: QueueEntry,
        ids: Sequence[str],
        *,
        dead: bool,
        error: str | None,
    ) -> list[tuple[int, int | None]]:
        """Move messages from `src` to `dest`; per id its status (1 moved, 0 absent, 2 in
        flight) and new sequence."""
        if not self._same_slot(src, dest):
            out: list[tuple[int, int | None]] = []
            for message_id in ids:
                try:
                    m = self._fetch(src, message_id)
                except ConveyorError:
                    out.append((0, None))
                    continue
                if not dead and m.visible_at > self.clock.now() and m.receive_count > 0:
                    out.append((2, None))
                    continue
                out.append((1, self._move_across(src, message_id, dest, dead=dead, error=error)))
            return out
        flat = self.redis.script(
            "move",
            [f"{src.prefix}meta", f"{dest.prefix}meta"],
            [
                src.prefix,
                src.name,
                dest.prefix,
                dest.name,
                num(self.clock.now()),
                self.channel,
                "dead" if dead else "redrive",
                error or "",
                *ids,
            ],
        )
        return [
            (int(flat[i]), int(flat[i + 1]) if flat[i + 1] is not None else None)
            for i in range(0, len(flat), 2)
        ]

    def move_to_dlq(self, queue: str, message_id: str, error: str | None = None) -> Message:
        entry = self._entry(queue)
        policy = entry.attrs.dead_letter
        if policy is None:
            raise no_dead_letter_policy(queue)
        dlq = self._maybe(policy.queue)
        if dlq is None:
            raise no_dead_letter_queue(policy.queue, queue)
        [(status, _)] = self._move(entry, dlq, [message_id], dead=True, error=error)
        if status == 0:
            raise no_message(queue, message_id)
        return self._fetch(dlq, message_id)

    def redrive(
        self,
        queue: str,
        *,
        ids: Sequence[str] | None = None,
        limit: int = 100,
        to: str | None = None,
    ) -> list[str]:
        entry = self._entry(queue)
        now = self.clock.now()
        if ids is not None:
            chosen = [self._fetch(entry, message_id) for message_id in ids]
            for m in chosen:
                if m.visible_at > now and m.receive_count > 0:
                    raise in_flight(m.id)
        else:
            chosen = self.list_messages(queue, state=MessageState.READY, limit=limit)
        by_dest: dict[str, list[str]] = {}
        for m in chosen:
            dest = to or m.source_queue
            if dest is None:
                raise no_source(m.id)
            by_dest.setdefault(dest, []).append(m.id)
        dests = {name: self._entry(name) for name in by_dest}
        moved: set[str] = set()
        for name, message_ids in by_dest.items():
            for message_id, (status, _) in zip(
                message_ids,
                self._move(entry, dests[name], message_ids, dead=False, error=None),
                strict=True,
            ):
                if status == 1:
                    moved.add(message_id)
        return [m.id for m in chosen if m.id in moved]

    def list_archive(
        self, queue: str, *, limit: int = 1000, after: int = 0
    ) -> list[ArchivedMessage]:
        entry = self._entry(queue)

        def read(client: Any) -> list[Any]:
            numbers = client.lrange(f"{entry.prefix}archive", after, after + limit - 1)
            pipe = client.pipeline(transaction=False)
            for n in numbers:
                pipe.hmget(f"{entry.prefix}arch:{n.decode()}", *ARCHIVE_FIELDS)
            return list(pipe.execute()) if numbers else []

        found = (archived(queue, values) for values in self.redis.run(read))
        return [a for a in found if a is not None]

    # -- topics ---------------------------------------------------------------------------

    def create_topic(self, name: str) -> bool:
        return bool(self.redis.registry("create_topic", name, num(self.clock.now())))

    def delete_topic(self, name: str) -> None:
        if not self.redis.registry("delete_topic", name):
            raise no_topic(name)

    def list_topics(self, prefix: str = "") -> list[str]:
        names = self.redis.run(lambda client: client.hkeys(f"{self._global}topics"))
        return sorted(n for n in (n.decode() for n in names) if n.startswith(prefix))

    def topic_settings(self, name: str) -> dict[str, str]:
        found = self.redis.registry("topic_settings", name)
        if found is None:
            raise no_topic(name)
        return _strings(found)

    def update_topic_settings(self, name: str, changes: Mapping[str, str | None]) -> dict[str, str]:
        found = self.redis.registry("update_topic", name, json.dumps(dict(changes)))
        if found == -1:
            raise no_topic(name)
        return _strings(found)

    def subscribe(
        self, topic: str, queue: str, attributes: Mapping[str, str] | None = None
    ) -> None:
        encoded = "" if attributes is None else json.dumps(dict(attributes))
        status = self.redis.registry("subscribe", topic, queue, encoded)
        if status == -1:
            raise no_topic(topic)
        if status == -2:
            raise no_queue(queue)

    def unsubscribe(self, topic: str, queue: str) -> None:
        if self.redis.registry("unsubscribe", topic, queue, "") == -1:
            raise no_topic(topic)

    def update_subscription(
        self, topic: str, queue: str, changes: Mapping[str, str | None]
    ) -> dict[str, str]:
        found = self.redis.registry("update_subscription", topic, json.dumps(dict(changes)), queue)
        if found == -1:
            raise no_topic(topic)
        if found == -3:
            raise not_subscribed(topic, queue)
        return _strings(found)

    def _subscribers(self, topic: str) -> list[tuple[QueueEntry, dict[str, str]]]:
        flat = self.redis.registry("subscribers", topic)
        if flat is None:
            raise no_topic(topic)
        entries = [
            (decode_entry(self.prefix, flat[i].decode(), flat[i + 1]), _strings(flat[i + 2]))
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
        now = self.clock.now()
        groups: dict[tuple[str, int], list[tuple[QueueEntry, NewMessage]]] = {}
        for name, copy in routed(subscribed, message):
            entry = subscribed[name]
            slot = entry.tag if self.redis.cluster else ""
            groups.setdefault((slot, id(copy)), []).append((entry, copy))
        out: dict[str, SendResult] = {}
        for group in groups.values():
            copy = group[0][1]
            deadline = "" if copy.deadline is None else num(copy.deadline)
            args: list[Any] = [
                num(now),
                num(now + DEDUP_WINDOW),
                self.channel,
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
            flat = self.redis.script(
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
        now = self.clock.now()
        registered = self.redis.registry(
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
        fields = self.redis.registry("heartbeat", consumer_id, num(self.clock.now()))
        if fields is None:
            raise consumer_gone(consumer_id)
        return self._consumer(consumer_id, fields)

    def unregister_consumer(self, consumer_id: str) -> None:
        self.redis.registry("unregister", consumer_id)

    def list_consumers(self, queue: str | None = None) -> list[Consumer]:
        flat = self.redis.registry("consumers", num(self.clock.now()))
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
