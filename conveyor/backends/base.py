"""The storage contracts: a small core every store implements, and optional contracts.

`Backend` is the core: queues, their stats, and the message operations (send, receive,
delete, change visibility) with long-poll waiting. `Editing`, `Topics`, `Consumers`,
`Pipeline` and `LoopCommits` are optional: a store implements one by inheriting it, or by
holding a part that does and returning it from the contract's accessor (`editing()`,
`topics()`, `consumers()`, `pipeline()`, `loop_commits()`). A store's capabilities follow
from the contracts it provides plus `features`, the semantic flags it declares (priority,
FIFO, at-most-once, archive, rate limit, compression, ...); the default is none. `Client`
checks both before it calls a store and raises `Unsupported` naming the store, so a store
never carries methods that only raise.

Methods are queue operations, batch-first. Each docstring states the guarantee the store
must give; the contract suite in ``tests/contract`` checks it on every store. Validation of
names, ranges and sizes happens in the client before a store is called; a store enforces
what only it can (existence, receipts, atomicity).
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    import asyncio

from ..clock import SYSTEM_CLOCK, Clock
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
    bare_message,
)
from ..notify import HUB

QUEUE_FEATURES = frozenset(
    {
        Capability.PRIORITY,
        Capability.FIFO,
        Capability.ARCHIVE,
        Capability.AT_MOST_ONCE,
        Capability.RATE_LIMIT,
        Capability.SENDER_IDS,
        Capability.DUPLICATE_REPORT,
        Capability.TOTALS,
        Capability.BINARY_BODIES,
        Capability.COMPRESSION,
        Capability.STRICT_RECEIPTS,
        Capability.GIVE_BACK,
    }
)
"""Every message-level feature of the contract: what a store that keeps all the rules has."""

T = TypeVar("T")


class Inline:
    """A call made inside `LoopCommits.inline()`. `short` (set by its caller): a short write (a
    send, receive, delete or visibility change: `conveyor.aio.offload_write`), which the
    store may run in a transaction it shares with the others of the event loop's turn.
    `lazy` (set by its caller): what it writes need not be on the disk before its caller
    answers, only committed (the store's next durable commit takes it there).
    `durable` is set when the call wrote, or read, something not yet committed, or not yet
    on the disk where it must be, before its caller answers (the caller awaits it)."""

    __slots__ = ("durable", "lazy", "short")

    def __init__(self) -> None:
        self.durable: Awaitable[None] | None = None
        self.short = False
        self.lazy = False


class RunAgain(Exception):
    """What the future `LoopCommits.gather` returns may end with: the call was not run, and its
    caller runs it again (on the event loop, where it may now run at once)."""


class WouldBlock(BaseException):
    """Raised inside `LoopCommits.inline()` where a call would wait (for a lock another thread
    or process holds, or for the disk), before it has changed anything: the caller runs the
    call again in a thread. A BaseException, so that no handler for errors swallows it."""


class Backend(ABC):
    """The core contract. Thread-safe: one instance serves any number of threads.

    A store is built by its URL factory (see `conveyor.urls`); building it opens nothing:
    connections and files are opened on first use and released by `close`.
    """

    scheme: str = ""
    features: frozenset[Capability] = frozenset()
    """The semantic flags this store honours (priority, FIFO, at-most-once, archive, rate
    limit, compression, ...); `Client` refuses queues and messages that need others."""
    one_writer: bool = False
    """A hint: the store makes one write at a time (more threads writing only wait for its
    lock), so a way in that writes from a pool gives it one thread."""
    joined_send_receive: bool = False
    """A hint: `send_receive` makes one transaction of the two (cheaper than a send and a
    receive), so a receiver waiting where the sender is may take its messages so."""
    batch_limit: int = 500
    """The most messages one call of send, receive, delete or change_visibility takes (one
    transaction where the store has them); `Queue` splits larger SDK calls into calls of
    this many."""

    def __init__(self, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.clock = clock

    @functools.cached_property
    def capabilities(self) -> frozenset[Capability]:
        """`features` plus one capability per optional contract this store provides."""
        provided = (
            (self.editing(), Capability.EDIT_IN_PLACE),
            (self.topics(), Capability.TOPICS),
            (self.consumers(), Capability.CONSUMERS),
            (self.pipeline(), Capability.PIPELINE),
        )
        return self.features | {cap for part, cap in provided if part is not None}

    # -- the optional contracts this store provides (itself, a part it holds, or none) ----

    def editing(self) -> Editing | None:
        return self if isinstance(self, Editing) else None

    def topics(self) -> Topics | None:
        return self if isinstance(self, Topics) else None

    def consumers(self) -> Consumers | None:
        return self if isinstance(self, Consumers) else None

    def pipeline(self) -> Pipeline | None:
        return self if isinstance(self, Pipeline) else None

    def loop_commits(self) -> LoopCommits | None:
        return self if isinstance(self, LoopCommits) else None

    # -- identity and waiting -------------------------------------------------------------

    @property
    @abstractmethod
    def key(self) -> str:
        """Identifies the data behind this store in this process (same key, same queues)."""

    @property
    def poll_interval(self) -> float:
        """Longest a long poll sleeps between receive attempts (bounds cross-process latency)."""
        return 0.2

    @property
    def first_poll_interval(self) -> float:
        """A long poll's first sleep after an empty receive, doubled after each one up to
        `poll_interval`: short where a receive is cheap."""
        return 0.01

    def change_token(self, queue: str) -> int:
        """A token that `wait_for_messages` compares, read before a receive attempt."""
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

    def migrate(self) -> tuple[int, int] | None:
        """Create or upgrade the store's schema now; (old, new) version, or None for stores
        without one. Stores with a schema also do this on first use."""
        return None

    def close(self) -> None:  # noqa: B027 - stores without resources need nothing
        """Release connections and files."""

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
        """Counts by state at this moment, and the queue's running totals (stores with the
        TOTALS feature)."""

    # -- messages -------------------------------------------------------------------------

    @abstractmethod
    def send(self, queue: str, messages: Sequence[NewMessage]) -> list[SendResult]:
        """Store every message, or none (one transaction).

        A message whose id the queue already holds is not stored: its result has
        duplicate=True. On FIFO queues a `dedup_id` seen in the last 5 minutes is a duplicate
        too, reported with the original id. First visible at now + delay.
        """

    def send_bodies(self, queue: str, bodies: Sequence[bytes], delay: float) -> list[str]:
        """`send` of bare messages on a standard queue: a body each (1 byte to the queue's
        limit, already checked), ids made by the store, no attributes, group, priority,
        deadline or compression, first visible at now + `delay`. The ids, in order.

        The default builds the messages and calls `send`; a store with a cheaper path for
        them overrides it (the contract suite checks both against each other), and leaves a
        FIFO queue to the default."""
        return [r.id for r in self.send(queue, [bare_message(b, delay) for b in bodies])]

    @abstractmethod
    def receive(self, queue: str, max_messages: int, visibility_timeout: float) -> list[Message]:
        """Claim up to `max_messages` ready messages and return them with fresh receipts.

        Claimed messages are invisible until now + visibility_timeout and have their
        receive_count raised. Highest priority first, then send order. On FIFO queues a
        group with a message in flight yields nothing. Messages past retention are expired,
        and ones at the dead-letter policy's max receive count are moved to the dead-letter
        queue, instead of being delivered. On at-most-once queues claimed messages are never
        visible again, and messages past their deadline are expired; on at-least-once
        queues a claim of a message with a deadline ends at that deadline if it comes
        sooner (`rules.deadline_rules`). Atomic against every other receiver.
        """

    def send_receive(
        self,
        queue: str,
        messages: Sequence[NewMessage],
        max_messages: int,
        visibility_timeout: float,
    ) -> tuple[list[SendResult], list[Message]]:
        """`send`, then `receive` from the same queue as it would after that send: for a
        receiver that waits on an empty queue where the sender is (the push gateway's
        dispatcher). The receive takes what is ready first (an older message before those
        just sent). A store that can do both in one transaction does, and says so
        (`joined_send_receive`); the default makes the two calls."""
        results = self.send(queue, messages)
        return results, self.receive(queue, max_messages, visibility_timeout)

    @abstractmethod
    def delete(self, queue: str, receipts: Sequence[str]) -> list[Exception | None]:
        """Delete the messages; per receipt, None or ReceiptHandleInvalid (changing nothing)."""

    @abstractmethod
    def change_visibility(
        self, queue: str, entries: Sequence[tuple[str, float]]
    ) -> list[Exception | None]:
        """Make each message visible at now + timeout; per entry, None or an error."""

    def give_back(self, queue: str, receipts: Sequence[str]) -> list[Exception | None]:
        """Make received messages visible again at once, as though that receive had not
        been made: for messages a receiver claimed and never handed to anyone (a push
        gateway's claimed ahead of its consumers, a worker's prefetched and not started).
        Each message's receive count goes back down by one (so that such receives bring it
        no nearer its dead-letter queue), its first receive time is forgotten where the
        count is back to 0, and the receipt no longer holds it. Per receipt, None or an
        error, as `change_visibility`. A store without Capability.GIVE_BACK (an SQS
        endpoint cannot lower a count) makes them visible with the receive counted."""
        return self.change_visibility(queue, [(receipt, 0.0) for receipt in receipts])


class Editing(ABC):
    """Inspection and editing in place, without receiving (capability EDIT_IN_PLACE).

    Every edit is atomic against receivers; reset, fail and moves between queues invalidate
    a message's outstanding receipts.
    """

    @abstractmethod
    def list_messages(
        self,
        queue: str,
        *,
        state: MessageState | None = None,
        limit: int = 100,
        after: int = 0,
    ) -> list[Message]:
        """Messages in delivery order (priority, then send order) with sequence > `after`,
        without receiving them. A message's `sequence` is its place in that order."""

    @abstractmethod
    def get_message(self, queue: str, message_id: str) -> Message:
        """The message with that id. MessageNotFound if absent."""

    @abstractmethod
    def update_message(self, queue: str, message_id: str, update: MessageUpdate) -> Message:
        """Edit body, attributes, priority or visible_at in place; bumps version.

        A new priority places the message at the back of that priority's messages, as if it
        were sent now, and invalidates its receipts (FIFO queues keep priority 0).
        """

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
        skipping the first `after` (stores with the ARCHIVE feature)."""


class Topics(ABC):
    """Topics that fan a message out to subscribed queues (capability TOPICS).

    A topic carries settings and each subscription attributes: string maps the store keeps
    and does not interpret (the SNS API keeps its topic attributes, tags, raw delivery and
    filter policies there).
    """

    @abstractmethod
    def create_topic(self, name: str) -> bool:
        """Create a topic; False if it existed."""

    @abstractmethod
    def delete_topic(self, name: str) -> None:
        """Delete a topic, its settings and its subscriptions. TopicDoesNotExist if absent."""

    @abstractmethod
    def list_topics(self, prefix: str = "") -> list[str]:
        """Topic names starting with `prefix`, sorted."""

    @abstractmethod
    def topic_settings(self, name: str) -> dict[str, str]:
        """The topic's settings ({} until some are set). TopicDoesNotExist if absent."""

    @abstractmethod
    def update_topic_settings(self, name: str, changes: Mapping[str, str | None]) -> dict[str, str]:
        """Set the settings `changes` names (None removes one), atomically against other
        updates; returns all of them. TopicDoesNotExist if absent."""

    @abstractmethod
    def subscribe(
        self, topic: str, queue: str, attributes: Mapping[str, str] | None = None
    ) -> None:
        """Subscribe `queue` to `topic` (idempotent); both must exist. With `attributes`,
        they become the subscription's; without, an existing subscription keeps its own."""

    @abstractmethod
    def unsubscribe(self, topic: str, queue: str) -> None:
        """Remove a subscription (nothing if there is none). TopicDoesNotExist if absent."""

    @abstractmethod
    def subscriptions(self, topic: str) -> dict[str, dict[str, str]]:
        """The subscribed queues, sorted by name, each with its subscription's attributes.
        TopicDoesNotExist if absent."""

    @abstractmethod
    def update_subscription(
        self, topic: str, queue: str, changes: Mapping[str, str | None]
    ) -> dict[str, str]:
        """Set a subscription's attributes as `update_topic_settings` does a topic's.
        TopicDoesNotExist, or NotFound when `queue` is not subscribed."""

    def topic_queues(self, topic: str) -> list[str]:
        """The subscribed queues, sorted."""
        return list(self.subscriptions(topic))

    @abstractmethod
    def publish(
        self, topic: str, message: NewMessage | Mapping[str, NewMessage]
    ) -> dict[str, SendResult]:
        """Send `message` to every subscribed queue in one transaction, or to none.

        Given a mapping, each subscribed queue it names gets its own copy and the others
        none (a queue subscribed since the caller looked gets nothing). Every copy carries
        the same id (the client chooses it); each queue's result says whether its copy was a
        duplicate there.
        """


def merge_settings(current: Mapping[str, str], changes: Mapping[str, str | None]) -> dict[str, str]:
    """`current` with `changes` applied: a value sets, None removes."""
    out = dict(current)
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def routed(
    queues: Iterable[str], message: NewMessage | Mapping[str, NewMessage]
) -> list[tuple[str, NewMessage]]:
    """The (queue, copy) pairs a publish delivers to the subscribed `queues`."""
    if isinstance(message, NewMessage):
        return [(name, message) for name in queues]
    return [(name, message[name]) for name in queues if name in message]


class Consumers(ABC):
    """A registry of live consumers with heartbeats (capability CONSUMERS)."""

    @abstractmethod
    def register_consumer(self, consumer: Consumer) -> Consumer:
        """Register (or re-register) a consumer; its heartbeat is now."""

    @abstractmethod
    def heartbeat(self, consumer_id: str) -> Consumer:
        """Refresh a consumer. NotFound if it was pruned (the caller re-registers)."""

    @abstractmethod
    def unregister_consumer(self, consumer_id: str) -> None:
        """Forget a consumer (nothing if it is unknown)."""

    @abstractmethod
    def list_consumers(self, queue: str | None = None) -> list[Consumer]:
        """Live consumers, oldest registration first; ones silent past their timeout are
        pruned first."""


@dataclass(frozen=True)
class Bounds:
    """How many rows a source holds and its lowest and highest row keys."""

    count: int
    low: int
    high: int

    def split(self, parts: int) -> list[tuple[int, int]]:
        """Up to `parts` contiguous (low, high] key ranges covering every row."""
        if self.count == 0:
            return []
        parts = max(1, min(parts, self.count))
        span = self.high - self.low + 1
        edges = [self.low - 1 + span * i // parts for i in range(parts + 1)]
        return [(edges[i], edges[i + 1]) for i in range(parts) if edges[i + 1] > edges[i]]


class Pipeline(ABC):
    """Bulk access for parallel jobs (capability PIPELINE; the Spark data source).

    - snapshots: a queue's rows (or its archive's) read by row-key range without receiving
      them, so any number of tasks each read a disjoint slice;
    - leases: messages claimed in bulk under (stream, lease number) with a long visibility
      timeout, readable again by lease and row range (a replayed batch sees the same
      messages) and acknowledged by lease number; a message whose lease ran out and which
      someone else received since is neither read nor deleted;
    - staged writes: messages inserted hidden under (sink, batch, partition, attempt),
      published in one transaction that also records (sink, batch), so a retried task or a
      replayed batch never duplicates, and discarded when a job aborts.

    Bodies come back as stored (compressed where the queue compresses); `Client.pipeline`
    decodes them.
    """

    @abstractmethod
    def row_bounds(self, queue: str, *, archive: bool = False) -> Bounds:
        """Row count and key range of a queue's messages (or its archive's)."""

    @abstractmethod
    def scan_messages(self, queue: str, low: int, high: int) -> Iterator[Message]:
        """Every message with low < row key <= high, in row-key order, none received."""

    @abstractmethod
    def scan_archive(self, queue: str, low: int, high: int) -> Iterator[ArchivedMessage]:
        """Every archived message with low < row key <= high, in row-key order."""

    @abstractmethod
    def stream_position(self, queue: str, stream: str) -> int:
        """The highest lease number acknowledged for `stream` on `queue` (0 at first)."""

    @abstractmethod
    def lease_messages(
        self, queue: str, stream: str, lease: int, max_messages: int, visibility_timeout: float
    ) -> int:
        """Top lease `lease` up to `max_messages` held messages; how many it holds.

        Messages are received (every rule of a receive applies: dead-lettering, deadlines,
        FIFO groups) with `visibility_timeout`, and each claim is recorded with its receipt
        token. Leasing a number again adds to it, so a planner that died after leasing
        re-plans the same batch.
        """

    @abstractmethod
    def lease_bounds(self, queue: str, stream: str, first: int, last: int) -> Bounds:
        """Row count and key range of what leases first..last hold."""

    @abstractmethod
    def read_leased(
        self, queue: str, stream: str, first: int, last: int, low: int, high: int
    ) -> Iterator[Message]:
        """Messages still held under leases first..last with low < row key <= high."""

    @abstractmethod
    def acknowledge_leases(self, queue: str, stream: str, upto: int) -> int:
        """Delete (archive, where the queue archives) what leases <= `upto` still hold, and
        record `upto` as the stream's position. Idempotent; returns how many were deleted."""

    @abstractmethod
    def stage_messages(
        self, queue: str, sink: str, batch: int, part: int, attempt: int,
        messages: Sequence[NewMessage],
    ) -> int:  # fmt: skip
        """Stage messages, hidden, under (sink, batch, part, attempt); how many were staged.
        Staging no messages records the attempt's stage all the same (publishing asks for
        every stage it is told of).

        A message whose id the queue holds is skipped, when it is staged or (on a store that
        stages aside, PostgreSQL and MySQL) when it is published. A message an earlier
        attempt of this sink's batch staged is this attempt's, if this attempt is published.
        """

    @abstractmethod
    def publish_staged(
        self, queue: str, sink: str, batch: int, tags: Sequence[tuple[int, int]]
    ) -> int | None:
        """Make visible what (part, attempt) in `tags` staged for (sink, batch), drop what
        other attempts staged, and record the batch, in one transaction; how many messages
        the queue gained. None if the batch was published before (nothing changes but the
        other attempts' rows going). Raises StagedWritesLost, publishing nothing, where a
        stage of `tags` is missing or holds fewer rows than it staged."""

    @abstractmethod
    def discard_staged(self, queue: str, sink: str, batch: int) -> int:
        """Remove everything staged for (sink, batch); how many messages went."""

    @abstractmethod
    def remove_messages(self, queue: str, ids: Sequence[str]) -> int:
        """Remove the messages with these ids, whatever their state (a job moved them on:
        neither archived nor counted as deleted); ids the queue lacks are skipped. A few
        statements per thousand ids. How many went."""


class LoopCommits(ABC):
    """Optional: calls that may run on an event loop's own thread, and writes gathered into
    one transaction. A store whose calls never wait without saying so (memory; a local
    SQLite file) provides it; `conveyor.aio` runs calls inline where it is there, and in a
    thread where it is not."""

    @abstractmethod
    def inline(self) -> AbstractContextManager[Inline]:
        """A context in which calls to this store may run on an event loop's own thread:
        inside it they do no blocking I/O and raise `WouldBlock` before they would wait
        (what must still reach the disk, the call leaves in `Inline.durable`)."""

    def gather(self, call: Callable[[], T]) -> asyncio.Future[T] | None:
        """Run `call`, a short write that raised `WouldBlock` inside `inline()`, together with
        the others waiting for the store's write lock, in one transaction taken by a thread
        of the store's; the future is resolved once that transaction has committed, or with
        `RunAgain` where the store hands the call back unrun. None (the default): the
        caller runs `call` in a thread of its own."""
        return None

    def gathering(self) -> bool:
        """Whether writes are being gathered (`gather`) now: a short write joins them at
        once rather than run on the event loop, where it would meet the lock taken."""
        return False
