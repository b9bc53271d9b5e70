"""The Redis store: every operation that touches more than one key is one Lua script
(`lua/`), so a claim, a delete, a move to the dead-letter queue or a fan-out is atomic
against every other client; the keys of one queue share a hash tag, so each script runs on
one Redis Cluster slot. Editing in place (editing.py) and topics and consumers
(registry.py) are parts the store holds."""

from __future__ import annotations

import math
import secrets
from collections.abc import Sequence
from typing import Any

from ...clock import Clock
from ...exceptions import ConveyorError, OutcomeUnknown
from ...ids import new_ids
from ...models import (
    Capability,
    Message,
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
from ..base import QUEUE_FEATURES, Backend
from ..codec import encode_attributes
from ..errors import (
    no_queue,
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
from .editing import RedisEditor
from .layout import LAYOUT
from .registry import RedisRegistry
from .values import (
    BAND,
    QueueEntry,
    decode_entry,
    messages,
    num,
    pack_ext,
    pack_message,
    queue_prefix,
)

# how long a queue's registry entry is trusted before it is read again (by the store's clock)
QUEUE_CACHE_SECONDS = 1.0


class RedisStore(Backend):
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
        self.global_prefix = f"{{{prefix}}}:"
        self.channel = f"{prefix}:wake"
        self.redis = RedisConnection(
            url,
            display=display,
            prefix=prefix,
            registry=self.global_prefix,
            channel=self.channel,
            reconnect_timeout=reconnect_timeout,
        )
        self._entries: dict[str, tuple[float, QueueEntry]] = {}
        self._swept: dict[str, float] = {}
        self._next_visible: dict[str, float] = {}
        self.editor = RedisEditor(self)
        self.registry = RedisRegistry(self)

    def editing(self) -> RedisEditor:
        return self.editor

    def topics(self) -> RedisRegistry:
        return self.registry

    def consumers(self) -> RedisRegistry:
        return self.registry

    @property
    def key(self) -> str:
        return f"redis:{self.display}#{self.prefix}"

    def close(self) -> None:
        self.redis.close()

    def migrate(self) -> tuple[int, int] | None:
        """Connect, upgrading keys of an earlier layout (layout.py); (old, new) layout."""
        self.redis.client()
        return self.redis.layout_found, int(LAYOUT)

    def queue_script(self, name: str, entry: QueueEntry, args: Sequence[Any]) -> Any:
        """Run a script of one queue (routed by its meta key)."""
        return self.redis.script(name, [entry.meta], args)

    @property
    def poll_interval(self) -> float:
        # sends wake waiters through a channel, and a waiter knows when the next invisible
        # message becomes visible: polling is only a safety net
        return self._poll_interval

    # -- queue entries --------------------------------------------------------------------

    def queue_entry(self, name: str, *, fresh: bool = False) -> QueueEntry:
        """The queue's registry entry, as read at most QUEUE_CACHE_SECONDS ago."""
        hit = self._entries.get(name)
        now = self.clock.now()
        if hit is not None and not fresh:
            read_at, entry = hit
            if 0.0 <= now - read_at < QUEUE_CACHE_SECONDS:
                return entry
        text = self.redis.run(lambda client: client.hget(f"{self.global_prefix}queues", name))
        if text is None:
            self._entries.pop(name, None)
            raise no_queue(name)
        entry = decode_entry(self.prefix, name, text)
        self._entries[name] = (now, entry)
        return entry

    def maybe_entry(self, name: str) -> QueueEntry | None:
        try:
            return self.queue_entry(name)
        except ConveyorError:
            return None

    # -- queues ---------------------------------------------------------------------------

    def create_queue(self, name: str, attributes: QueueAttributes) -> tuple[QueueInfo, bool]:
        now = self.clock.now()
        tag = name
        policy = attributes.dead_letter
        dlq = self.maybe_entry(policy.queue) if policy is not None else None
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
            _, left = self.queue_script("clear", entry, [entry.prefix, 1000, "1"])
            if not left:
                return

    def list_queues(self, prefix: str = "") -> list[str]:
        names = self.redis.run(lambda client: client.hkeys(f"{self.global_prefix}queues"))
        return sorted(n for n in (n.decode() for n in names) if n.startswith(prefix))

    def get_queue(self, name: str) -> QueueInfo:
        return self.queue_entry(name, fresh=True).info()

    def set_queue_attributes(self, name: str, attributes: QueueAttributes) -> QueueInfo:
        old = self.queue_entry(name, fresh=True)
        entry = old._replace(attrs=attributes, updated_at=self.clock.now())
        if not self.redis.registry("set_queue", name, entry.encode()):
            self._entries.pop(name, None)
            raise no_queue(name)
        self._entries[name] = (self.clock.now(), entry)
        return entry.info()

    def purge_queue(self, name: str) -> int:
        entry = self.queue_entry(name)
        gone = 0
        while True:
            n, left = self.queue_script("clear", entry, [entry.prefix, 1000, "0"])
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
        while self.queue_script("sweep", entry, args) >= SWEEP_ROWS and whole:
            pass

    def queue_stats(self, name: str) -> QueueStats:
        entry = self.queue_entry(name)
        now = self.clock.now()
        self._sweep(entry, now, whole=True)
        ready, delayed, flying, oldest, sent, received, deleted, dead, expired = self.queue_script(
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
        entry = self.queue_entry(queue)
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
        return None if policy is None else self.maybe_entry(policy.queue)

    def same_slot(self, a: QueueEntry, b: QueueEntry) -> bool:
        return not self.redis.cluster or a.tag == b.tag

    def receive(self, queue: str, max_messages: int, visibility_timeout: float) -> list[Message]:
        entry = self.queue_entry(queue)
        attrs = entry.attrs
        now = self.clock.now()
        self._sweep(entry, now)
        terms = claim_terms(attrs, now, visibility_timeout)
        token = claim_token(now)
        policy = attrs.dead_letter
        dlq = self._dead_letter_target(entry)
        inside = dlq is not None and self.same_slot(entry, dlq)
        claimed, next_visible, outbox = self.queue_script(
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
                self.editor.move_across(entry, message_id.decode(), dlq, dead=True, error=None)
        if not claimed:
            self._next_visible[queue] = float(next_visible) if next_visible else math.inf
            return []
        return messages(queue, claimed, receipt_prefix(queue, token))

    def delete(self, queue: str, receipts: Sequence[str]) -> list[Exception | None]:
        entry = self.queue_entry(queue)
        head = [entry.prefix, queue, num(self.clock.now()), "1" if entry.attrs.archive else "0"]
        return self._by_receipt("delete", entry, head, [(r, ()) for r in receipts])

    def change_visibility(
        self, queue: str, entries: Sequence[tuple[str, float]]
    ) -> list[Exception | None]:
        entry = self.queue_entry(queue)
        now = self.clock.now()
        head = [entry.prefix, queue, num(now), self.channel, ""]
        return self._by_receipt(
            "visibility", entry, head, [(r, (num(now + t),)) for r, t in entries]
        )

    def give_back(self, queue: str, receipts: Sequence[str]) -> list[Exception | None]:
        entry = self.queue_entry(queue)
        now = num(self.clock.now())
        head = [entry.prefix, queue, now, self.channel, "back"]
        return self._by_receipt("visibility", entry, head, [(r, (now,)) for r in receipts])

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
                held, self.queue_script(script, entry, args), strict=True
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
