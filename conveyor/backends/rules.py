"""Rules of the queue contract that every store applies the same way: delivery order keys,
de-duplication keys, the rate limit's token bucket, which sends are bare bodies, and what a
receive claims with."""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Sequence
from typing import Generic, NamedTuple, TypeVar

from ..models import FAR_FUTURE, Delivery, NewMessage, QueueAttributes
from ..validation import MAX_PRIORITY, MIN_PRIORITY

# A message's place in delivery order as one number: its priority's band, then its send
# sequence within the band. Higher priorities get lower bands.
SEQ_BITS = 47
SEQ_MASK = (1 << SEQ_BITS) - 1
BAND = 1 << SEQ_BITS

SWEEP_INTERVAL = 60.0  # how often a store reclaims expired messages of a queue it receives from
SWEEP_ROWS = 1000  # how many rows of a queue's head one sweep looks at
GROUP_FILL_WINDOW = 1000  # how far a FIFO receive looks past a full batch for its groups' rest


def band(priority: int) -> int:
    """The first delivery-order number of a priority's band."""
    return (MAX_PRIORITY - priority) << SEQ_BITS


def order_key(priority: int, seq: int) -> int:
    """A message's place in delivery order: its priority's band, then `seq`."""
    return ((MAX_PRIORITY - max(MIN_PRIORITY, min(MAX_PRIORITY, priority))) << SEQ_BITS) | (
        seq & SEQ_MASK
    )


def order_after(after: int) -> tuple[int, int]:
    """(priority, seq) of a place in delivery order, to list what comes after it."""
    if after <= 0:
        return MAX_PRIORITY + 1, 0
    return MAX_PRIORITY - (after >> SEQ_BITS), after & SEQ_MASK


def dedup(message: NewMessage, attrs: QueueAttributes) -> tuple[str | None, str | None]:
    """A FIFO send's de-duplication id (the one sent, else, with content-based
    de-duplication, its body's SHA-256: what the message shows) and the key the queue
    de-duplicates it by: that id, or on a queue that de-duplicates per group a digest of the
    group and the id (at most 66 characters, whatever the two are). (None, None) on a
    standard queue."""
    if not attrs.fifo:
        return None, None
    import hashlib  # FIFO sends alone use it

    if message.dedup_id is not None:
        shown = message.dedup_id
    elif attrs.content_based_dedup:
        shown = hashlib.sha256(message.body).hexdigest()
    else:
        return None, None
    if attrs.dedup_per_group and message.group_id is not None:
        scoped = f"{message.group_id}\0{shown}".encode()
        return shown, "g:" + hashlib.sha256(scoped).hexdigest()
    return shown, shown


def refill_tokens(tokens: float, tokens_at: float, rate: float, now: float) -> float:
    """Token bucket with a one-second burst."""
    return min(rate if rate >= 1 else 1.0, tokens + max(0.0, now - tokens_at) * rate)


def bare_bodies(messages: Sequence[NewMessage]) -> bool:
    """Whether the messages are bare bodies of one priority and delay, with ids to make up:
    no attributes, group, deadline or compression."""
    first = messages[0]
    priority, delay = first.priority, first.delay
    for m in messages:  # a plain loop: all() over a generator resumes a frame a message
        if not (
            (m.generated_id or not m.id)
            and not m.attributes
            and m.group_id is None
            and m.deadline is None
            and not m.compressed
            and m.priority == priority
            and m.delay == delay
        ):
            return False
    return True


class ClaimTerms(NamedTuple):
    """What one receive claims with: now, the claimed messages' visible_at, the retention
    horizon (messages sent before it are expired, never delivered), and the two deadline
    rules (`deadline_rules`)."""

    now: float
    visible_at: float
    horizon: float
    expires: float
    cut_from: float


# Deadlines, as gq's document states them. On an at-most-once queue a message past its
# deadline is expired: never delivered, counted as expired. On an at-least-once queue a
# deadline does not expire the message: a claim made before the deadline ends at the
# deadline at the latest, so that once it passes another consumer may take the message.
# Both rules are thresholds a store compares deadlines with (finite: MySQL has no infinity).
NEVER_EXPIRES = -FAR_FUTURE  # no deadline is at or before it
NEVER_CUT = FAR_FUTURE  # no deadline is after it


def deadline_rules(attrs: QueueAttributes, now: float) -> tuple[float, float]:
    """(expires, cut_from) at `now`: a message whose deadline is at or before `expires` is
    expired; a claim of one whose deadline is after `cut_from` ends at its deadline when
    that is sooner than the claim's end."""
    if attrs.delivery is Delivery.AT_MOST_ONCE:
        return now, NEVER_CUT
    return NEVER_EXPIRES, now


def claimed_until(terms: ClaimTerms, deadline: float | None) -> float:
    """When a message claimed with `terms` becomes visible again."""
    if deadline is not None and terms.cut_from < deadline < terms.visible_at:
        return deadline
    return terms.visible_at


def expired(sent_at: float | None, deadline: float | None, horizon: float, expires: float) -> bool:
    """Whether a message is past retention (sent before `horizon`; None: not known) or its
    deadline (at or before `expires`, `deadline_rules`): never delivered again, nor
    counted."""
    return (sent_at is not None and sent_at < horizon) or (
        deadline is not None and deadline <= expires
    )


class Tally(NamedTuple):
    """A queue's messages by state, and when its oldest was sent (None: no messages)."""

    ready: int
    delayed: int
    in_flight: int
    oldest: float | None


def tally(messages: Iterable[tuple[float, int, float]], now: float) -> Tally:
    """Count messages given as (visible_at, receive_count, sent_at): ready where visible,
    else in flight where ever received, else delayed (as `Message.state` says)."""
    ready = delayed = in_flight = 0
    oldest: float | None = None
    for visible_at, receive_count, sent_at in messages:
        if visible_at <= now:
            ready += 1
        elif receive_count:
            in_flight += 1
        else:
            delayed += 1
        if oldest is None or sent_at < oldest:
            oldest = sent_at
    return Tally(ready, delayed, in_flight, oldest)


def claim_terms(attrs: QueueAttributes, now: float, visibility_timeout: float) -> ClaimTerms:
    at_most_once = attrs.delivery is Delivery.AT_MOST_ONCE
    visible_at = FAR_FUTURE if at_most_once else now + visibility_timeout
    return ClaimTerms(now, visible_at, now - attrs.retention, *deadline_rules(attrs, now))


def walks_head(attrs: QueueAttributes) -> bool:
    """Whether a receive walks the queue's head one message at a time (FIFO groups, dead
    letters, rate limits) rather than claim its first ready messages in one step."""
    return attrs.fifo or attrs.dead_letter is not None or bool(attrs.rate_limit)


K = TypeVar("K", bound=Hashable)


class GroupFill(Generic[K]):
    """A FIFO receive serves message groups as SQS does.

    A group is open while its earliest message is visible, and open groups take their turns
    in the order they opened: when their earliest message became visible, on its send (and
    the queue's delay) or when it came back from a receive (its visibility timeout ended or
    was changed). So a group whose messages came back waits behind the groups that were
    waiting meanwhile. A batch fills from one group before it takes the next, each group's
    messages in send order; a group serves the run of visible messages at its head.

    A store walks its queue in send order, tells `step` of each message it walks past
    (whether or not that one can be delivered) and `add`s each it could deliver; `chosen()`
    gives the first `limit` of them, group after group. The walk may stop once `done`: the
    group that opened first has `limit` messages and no group the walk has yet to reach
    can have opened before it, or the batch is full and the walk has gone
    `GROUP_FILL_WINDOW` messages further without filling it from fewer groups.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.groups: dict[str | None, list[K]] = {}
        self.opened: dict[str | None, tuple[float, int]] = {}
        self.first: tuple[float, int] | None = None  # when the first group opened
        self.first_group: str | None = None
        self.horizon = -math.inf
        self.total = 0
        self.beyond = 0

    def step(self, visible_at: float, receive_count: int) -> None:
        """One message walked past: when it is visible and how often it was received.

        A message never received is visible from its send (and the queue's delay), and every
        message sent after it no sooner, received since or not: no group the walk reaches
        later opened before it.
        """
        if receive_count == 0:
            self.horizon = visible_at
        if self.total >= self.limit:
            self.beyond += 1

    def add(self, group: str | None, key: K, visible_at: float) -> None:
        """A deliverable message; `visible_at` is when it became visible."""
        keys = self.groups.get(group)
        if keys is None:
            keys = self.groups[group] = []
            opened = self.opened[group] = (visible_at, len(self.opened))  # ties: walk order
            if self.first is None or opened < self.first:
                self.first, self.first_group = opened, group
        if len(keys) < self.limit:
            keys.append(key)
            self.total += 1

    @property
    def done(self) -> bool:
        if self.first is None:
            return False
        if self.beyond >= GROUP_FILL_WINDOW:
            return True
        return len(self.groups[self.first_group]) >= self.limit and self.first[0] <= self.horizon

    def chosen(self) -> list[K]:
        out: list[K] = []
        for group in sorted(self.opened, key=self.opened.__getitem__):
            out.extend(self.groups[group][: self.limit - len(out)])
            if len(out) >= self.limit:
                break
        return out
