"""Which consumer of an app takes the next message: shares that follow the weights, with a
backlog as with a trickle. Pure: consumers in, a plan out; no sockets, no clock.

Each consumer has a *pass*, which grows by 1/weight with each message it is given; the next
message goes to the consumer with the lowest pass (stride scheduling), so over any run of
messages each consumer's share is its weight over the total. A consumer takes at most its
window (`prefetch`) of messages it has not answered. When the consumer whose turn it is has
no room, the others wait for it (its share would go to them otherwise, and with a backlog
every share would be set by how fast each consumer answers, not by its weight), unless it
has had no room for the stall time: then it is *stalled* and skipped (its turns are lost,
not owed) until it answers again. So a slow consumer gets what it answers, plus its window,
and the others share the rest by their weights.

Weight 0 marks a standby: it gets messages only while every weighted consumer is stalled.
When every consumer has weight 0, each counts as 1. A consumer that joins starts at the
lowest pass of those there, less a little catch-up (`CATCH_UP` messages' worth), so that
consumers started together end up with their shares even if one was there first.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from typing import Protocol, TypeVar

CATCH_UP = 256  # messages' worth of turns a consumer that joins may take before the others


class Sharer(Protocol):
    """What a consumer tells the plan: its weight, its room, its pass and whether it is
    stalled (`Peer` is one)."""

    weight: int
    share_pass: float
    stalled: bool

    @property
    def alive(self) -> bool: ...

    @property
    def free(self) -> int: ...


S = TypeVar("S", bound=Sharer)


def weight_of(peer: Sharer, weighted: bool) -> int:
    """The weight that counts: its own where some consumer has one, else 1."""
    return peer.weight if weighted else 1


def weights_count(peers: Iterable[Sharer]) -> bool:
    """Whether weights count: some alive consumer has a weight above 0."""
    return any(p.alive and p.weight > 0 for p in peers)


def entitled(peers: Iterable[S]) -> tuple[list[S], bool]:
    """The consumers that take turns (alive, not stalled, weighted where any is), and
    whether weights count (`weights_count`)."""
    alive = [p for p in peers if p.alive]
    weighted = weights_count(alive)
    return [p for p in alive if not p.stalled and (p.weight > 0 or not weighted)], weighted


def plan(peers: Sequence[S], most: int) -> list[S]:
    """Who takes each of the next `most` messages, in order, as far as it can be said now:
    the turns in pass order, up to the first consumer whose turn it is and who has no room
    (the rest wait for it). Passes are not changed (`took` does, for what is delivered).
    With every consumer stalled or standby, whoever has room, in pass order."""
    turns, weighted = entitled(peers)
    if not turns:  # standby: every consumer with room
        turns = [p for p in peers if p.alive and p.free > 0]
        weighted = False
        hold_back = False
    else:
        hold_back = True
    room = [p.free for p in turns]
    steps = [1.0 / weight_of(p, weighted) for p in turns]
    # the next turn is the lowest (pass, k): ties go to who joined first
    queue = [(p.share_pass, k) for k, p in enumerate(turns)]
    heapq.heapify(queue)
    out: list[S] = []
    while len(out) < most and queue:
        at, i = queue[0]
        if room[i] <= 0:
            if hold_back:
                break
            heapq.heappop(queue)
            continue
        out.append(turns[i])
        room[i] -= 1
        heapq.heapreplace(queue, (at + steps[i], i))
    return out


def owed(peers: Sequence[S]) -> S | None:
    """The consumer whose turn it is (lowest pass), whether or not it has room; None when no
    consumer takes turns (all stalled, standby or gone)."""
    turns, _ = entitled(peers)
    return min(turns, key=lambda p: p.share_pass) if turns else None


def took(peer: Sharer, weighted: bool) -> None:
    """`peer` was given a message: its pass moves on by 1/weight (`weighted`: whether
    weights count, `weights_count` of its app's consumers, the same for a batch)."""
    if peer.weight > 0 or not weighted:
        peer.share_pass += 1.0 / weight_of(peer, weighted)


def lowest(peers: Iterable[Sharer], but: Sharer | None = None) -> float | None:
    """The lowest pass of the alive consumers that take turns (but `but`)."""
    found = [p.share_pass for p in peers if p.alive and p is not but and not p.stalled]
    return min(found) if found else None


def joined(peer: Sharer, others: Iterable[Sharer]) -> None:
    """A consumer that joins starts at the others' lowest pass, less its catch-up."""
    low = lowest(others, but=peer)
    if low is not None:
        peer.share_pass = max(0.0, low - CATCH_UP / max(1, peer.weight))


def resumed(peer: Sharer, others: Iterable[Sharer]) -> None:
    """A stalled consumer answered: it takes turns again, from the others' lowest pass (the
    turns it missed are not owed)."""
    peer.stalled = False
    low = lowest(others, but=peer)
    if low is not None:
        peer.share_pass = max(peer.share_pass, low)
