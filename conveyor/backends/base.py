"""The storage contract: one abstract class every store implements.

Methods are queue operations, batch-first. Each docstring states the guarantee the store
must give; the contract suite in ``tests/contract`` checks it on every store. Validation of
names, ranges and sizes happens in the client before a store is called; a store enforces
what only it can (existence, receipts, atomicity).
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from ..clock import SYSTEM_CLOCK, Clock
from ..exceptions import ReceiptHandleInvalid, Unsupported
from ..models import (
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
)
from ..notify import HUB

ALL_CAPABILITIES = frozenset(Capability)


class Backend(ABC):
    """A store. Thread-safe; one instance may serve any number of threads."""

    scheme: str = ""
    capabilities: frozenset[Capability] = ALL_CAPABILITIES

    def __init__(self, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.clock = clock

    # -- identity and waiting -------------------------------------------------------------

    @property
    @abstractmethod
    def key(self) -> str:
        """Identifies the data behind this store in this process (same key, same queues)."""

    @property
    def poll_interval(self) -> float:
        """Longest a long poll sleeps between receive attempts (bounds cross-process latency)."""
        return 0.2

    def change_token(self, queue: str) -> int:
        return HUB.version(self.key, queue)

    def notify(self, queue: str) -> None:
        """Wake the receivers of `queue` waiting in this process."""
        HUB.notify(self.key, queue)

    def wait_for_messages(self, queue: str, since: int, timeout: float) -> None:
        """Block up to `timeout` or until a send to `queue` may have made a message ready.

        The generic version waits for an in-process notification; stores with a push
        mechanism of their own (LISTEN/NOTIFY, blocking pops) override it.
        """
        if self.clock.manual:
            self.clock.sleep(timeout)
            return
        HUB.wait(self.key, queue, since, timeout)

    async def wait_for_messages_async(self, queue: str, since: int, timeout: float) -> None:
        """`wait_for_messages` for the event loop: holds no thread while it waits.

        Waiting tasks are woken one per send; one ticker per queue retries the longest
        waiter every `poll_interval` (delays ending, other processes' sends), so an idle
        queue costs a few receives a second however many tasks wait on it.
        """
        if self.clock.manual:
            self.clock.sleep(min(timeout, self.poll_interval))
            return
        await HUB.wait_async(self.key, queue, since, timeout, self.poll_interval)

    def require(self, capability: Capability, operation: str) -> None:
        if capability not in self.capabilities:
            raise Unsupported(
                f"the {self.scheme or type(self).__name__} store does not support {operation}"
            )

    def migrate(self) -> tuple[int, int] | None:
        """Create or upgrade the store's schema now; (old, new) version, or None for stores
        without one. Stores with a schema also do this on first use."""
        return None

    def close(self) -> None:  # noqa: B027 - stores without resources need nothing
        """Release connections and files."""

    @classmethod
    def from_url(cls, rest: str, params: dict[str, str], *, clock: Clock) -> Backend:
        """Build the store from the part of its URL after ``scheme://`` and its query."""
        raise NotImplementedError(f"{cls.__name__} cannot be built from a URL")

    # -- queues ---------------------------------------------------------------------------

    @abstractmethod
    def create_queue(self, name: str, attributes: QueueAttributes) -> tuple[QueueInfo, bool]:
        """Create `name`; idempotent when attributes are equal (returns created=False).

        Raises QueueExists when the queue exists with different attributes.
        """

    @abstractmethod
    def delete_queue(self, name: str) -> None:
        """Delete the queue, its messages and subscriptions. QueueDoesNotExist if absent."""

    @abstractmethod
    def list_queues(self, prefix: str = "") -> list[str]:
        """Names starting with `prefix`, sorted."""

    @abstractmethod
    def get_queue(self, name: str) -> QueueInfo:
        """The queue's attributes. QueueDoesNotExist if absent."""

    @abstractmethod
    def set_queue_attributes(self, name: str, attributes: QueueAttributes) -> QueueInfo:
        """Replace the queue's attributes (already validated)."""

    @abstractmethod
    def purge_queue(self, name: str) -> int:
        """Remove every message of the queue; returns how many."""

    @abstractmethod
    def queue_stats(self, name: str) -> QueueStats:
        """Counts by state at this moment, and the queue's running totals."""

    # -- messages -------------------------------------------------------------------------

    @abstractmethod
    def send(self, queue: str, messages: Sequence[NewMessage]) -> list[SendResult]:
        """Store every message, or none (one transaction).

        A message whose id the queue already holds is not stored: its result has
        duplicate=True. On FIFO queues a `dedup_id` seen in the last 5 minutes is a duplicate
        too, reported with the original id. First visible at now + delay.
        """

    @abstractmethod
    def receive(self, queue: str, max_messages: int, visibility_timeout: float) -> list[Message]:
        """Claim up to `max_messages` ready messages and return them with fresh receipts.

        Claimed messages are invisible until now + visibility_timeout and have their
        receive_count raised. Highest priority first, then send order. On FIFO queues a
        group with a message in flight yields nothing. Messages past their deadline are
        expired, and ones at the dead-letter policy's max receive count are moved to the
        dead-letter queue, instead of being delivered. On at-most-once queues claimed
        messages are never visible again. Atomic against every other receiver.
        """

    @abstractmethod
    def delete(self, queue: str, receipts: Sequence[str]) -> list[Exception | None]:
        """Delete the messages; per receipt, None or ReceiptHandleInvalid (changing nothing)."""

    @abstractmethod
    def change_visibility(
        self, queue: str, entries: Sequence[tuple[str, float]]
    ) -> list[Exception | None]:
        """Make each message visible at now + timeout; per entry, None or an error."""

    # -- inspection and editing in place --------------------------------------------------

    @abstractmethod
    def list_messages(
        self,
        queue: str,
        *,
        state: MessageState | None = None,
        limit: int = 100,
        after: int = 0,
    ) -> list[Message]:
        """Messages in delivery order with sequence > `after`, without receiving them."""

    @abstractmethod
    def get_message(self, queue: str, message_id: str) -> Message:
        """The message with that id. MessageNotFound if absent."""

    @abstractmethod
    def update_message(self, queue: str, message_id: str, update: MessageUpdate) -> Message:
        """Edit body, attributes, priority or visible_at in place; bumps version."""

    @abstractmethod
    def remove_message(self, queue: str, message_id: str) -> None:
        """Remove by id whatever its state. MessageNotFound if absent."""

    @abstractmethod
    def move_to_dlq(self, queue: str, message_id: str, error: str | None = None) -> Message:
        """Move a message to the queue's dead-letter queue now (marks it invalid).

        Keeps id, body and attributes; records the source queue and `error`; resets
        receive_count. InvalidState when the queue has no dead-letter policy.
        """

    @abstractmethod
    def redrive(
        self,
        queue: str,
        *,
        ids: Sequence[str] | None = None,
        limit: int = 100,
        to: str | None = None,
    ) -> list[str]:
        """Move messages out of the dead-letter queue `queue`, oldest first.

        Each goes to `to`, or to the source queue it came from, at the back of that queue,
        with receive_count 0. With `ids`, exactly those (MessageNotFound if one is absent,
        InvalidState if one is in flight); otherwise up to `limit` ready ones. Returns the
        ids moved.
        """

    @abstractmethod
    def reset_message(self, queue: str, message_id: str) -> Message:
        """receive_count 0, visible now, receipts invalidated."""

    @abstractmethod
    def fail_message(self, queue: str, message_id: str, delay: float = 0.0) -> Message:
        """Release for redelivery after `delay`; invalidates outstanding receipts."""

    @abstractmethod
    def list_archive(
        self, queue: str, *, limit: int = 1000, after: int = 0
    ) -> list[ArchivedMessage]:
        """Archived (deleted or expired) messages of a queue with `archive` on, oldest first,
        skipping the first `after`."""

    # -- topics ---------------------------------------------------------------------------

    @abstractmethod
    def create_topic(self, name: str) -> bool:
        """Create a topic; False if it existed."""

    @abstractmethod
    def delete_topic(self, name: str) -> None: ...

    @abstractmethod
    def list_topics(self, prefix: str = "") -> list[str]: ...

    @abstractmethod
    def subscribe(self, topic: str, queue: str) -> None:
        """Subscribe `queue` to `topic` (idempotent); both must exist."""

    @abstractmethod
    def unsubscribe(self, topic: str, queue: str) -> None: ...

    @abstractmethod
    def topic_queues(self, topic: str) -> list[str]: ...

    @abstractmethod
    def publish(self, topic: str, message: NewMessage) -> dict[str, SendResult]:
        """Send `message` to every subscribed queue in one transaction, or to none."""

    # -- consumers ------------------------------------------------------------------------

    @abstractmethod
    def register_consumer(self, consumer: Consumer) -> Consumer:
        """Register (or re-register) a consumer; its heartbeat is now."""

    @abstractmethod
    def heartbeat(self, consumer_id: str) -> Consumer:
        """Refresh a consumer. NotFound if it was pruned (the caller re-registers)."""

    @abstractmethod
    def unregister_consumer(self, consumer_id: str) -> None: ...

    @abstractmethod
    def list_consumers(self, queue: str | None = None) -> list[Consumer]:
        """Live consumers; ones silent past their timeout are pruned first."""


# -- helpers shared by stores ---------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def _queue_tag(queue: str) -> str:
    return base64.urlsafe_b64encode(queue.encode()).decode().rstrip("=")


def make_receipt(queue: str, row: int, message_id: str, token: str) -> str:
    """An opaque receipt: the queue, the receive's token, the message's row and id."""
    return f"{_queue_tag(queue)}.{token}.{row:x}.{message_id}"


def claim_receipts(queue: str, token: str, rows: Sequence[Sequence[Any]]) -> list[str]:
    """`make_receipt` for the rows of one receive: (row, message id, ...) each."""
    prefix = f"{_queue_tag(queue)}.{token}."
    return [f"{prefix}{r[0]:x}.{r[1]}" for r in rows]


def parse_receipt(queue: str, receipt: str) -> tuple[int, str, str]:
    """(row, message id, token) from a receipt of `queue`; ReceiptHandleInvalid otherwise."""
    return _parse_receipt(_queue_tag(queue), queue, receipt)


def _parse_receipt(tag: str, queue: str, receipt: str) -> tuple[int, str, str]:
    parts = receipt.split(".", 3) if isinstance(receipt, str) and len(receipt) <= 2048 else []
    try:
        if len(parts) != 4 or len(parts[1]) != 16 or not parts[3]:
            raise ValueError
        row = int(parts[2], 16)
        int(parts[1], 16)
    except ValueError:
        raise ReceiptHandleInvalid(
            f"receipt handle {receipt!r:.60} is malformed: pass the receipt a receive returned"
        ) from None
    if parts[0] != tag:
        try:
            owner = base64.urlsafe_b64decode(parts[0] + "=" * (-len(parts[0]) % 4)).decode()
        except (ValueError, binascii.Error, UnicodeDecodeError):
            owner = "?"
        raise ReceiptHandleInvalid(f"this receipt handle belongs to queue {owner!r}, not {queue!r}")
    return row, parts[3], parts[1]


def receipt_claim(receipt: str) -> tuple[int, str, str]:
    """(row, message id, token) of a receipt this store has just made (not validated)."""
    _, token, row, message_id = receipt.split(".", 3)
    return int(row, 16), message_id, token


Parsed = tuple[int, str, str] | ReceiptHandleInvalid


def group_receipts(
    queue: str, receipts: Sequence[str]
) -> tuple[list[Parsed], dict[str, list[int]]]:
    """Each receipt parsed (or its error), and the rows to delete grouped by receive token:
    receipts of one receive share its token, so one statement per token deletes them."""
    tag = _queue_tag(queue)
    parsed: list[Parsed] = []
    by_token: dict[str, list[int]] = {}
    for receipt in receipts:
        try:
            item = _parse_receipt(tag, queue, receipt)
        except ReceiptHandleInvalid as exc:
            parsed.append(exc)
            continue
        parsed.append(item)
        rows = by_token.get(item[2])
        if rows is None:
            by_token[item[2]] = [item[0]]
        else:
            rows.append(item[0])
    return parsed, by_token


def receipt_results(parsed: Sequence[Parsed], gone: set[int]) -> list[Exception | None]:
    """Per receipt: None if its row was deleted, else why not."""
    results: list[Exception | None] = []
    for item in parsed:
        if isinstance(item, ReceiptHandleInvalid):
            results.append(item)
        elif item[0] in gone:
            gone.discard(item[0])
            results.append(None)
        else:
            results.append(stale_receipt(item[1]))
    return results


def stale_receipt(message_id: str) -> ReceiptHandleInvalid:
    return ReceiptHandleInvalid(
        f"receipt handle for message {message_id!r} is no longer valid: the message was"
        " deleted or received again since (receive it again for a fresh receipt)"
    )


def bare_bodies(messages: Sequence[NewMessage]) -> bool:
    """Whether the messages are bare bodies of one priority and delay, with ids to make up:
    no attributes, group, deadline or compression."""
    first = messages[0]
    priority, delay = first.priority, first.delay
    return all(
        (m.generated_id or not m.id)
        and not m.attributes
        and m.group_id is None
        and m.deadline is None
        and not m.compressed
        and m.priority == priority
        and m.delay == delay
        for m in messages
    )


def dedup_key(message: NewMessage, content_based: bool) -> str | None:
    if message.dedup_id is not None:
        return message.dedup_id
    if content_based:
        return hashlib.sha256(message.body).hexdigest()
    return None


def refill_tokens(tokens: float, tokens_at: float, rate: float, now: float) -> float:
    """Token bucket with a one-second burst."""
    return min(rate if rate >= 1 else 1.0, tokens + max(0.0, now - tokens_at) * rate)
