"""The push gateway's side of the store: operations of one kind on one queue gathered into one
call (`Batcher`, `QueueOps`), and the dispatcher of each queue, which receives by long poll
and pushes to the consumers with room."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Generic, TypeVar, cast

from ..aio import long_poll_async
from ..exceptions import ConveyorError
from ..models import Message, SendResult
from ..notify import running_loop, settle
from ..queues import decode_message
from ..sends import Send
from . import shares
from .peers import Delivery, Peer

if TYPE_CHECKING:
    from .gateway import Gateway

log = logging.getLogger("conveyor.push")

In = TypeVar("In")
R = TypeVar("R")

RECEIVE_WAIT = 20.0  # seconds a dispatcher's long poll waits before asking again
# messages a dispatcher claims at once, at most (and at most the store's `batch_limit`):
# one transaction for many pushes
CLAIM_MOST = 100
# consumers that took all of a full claim within this (seconds) keep up with a backlog: the
# next claim takes QUICK_ROUNDS rounds of their windows (a quarter of the claims; a round
# for slower ones, whose messages would only wait longer, held, for rooms)
QUICK_ROUND = 0.05
QUICK_ROUNDS = 4


class Batcher(Generic[In, R]):
    """Store operations of one kind on one queue, gathered while the previous batch is in
    the store and done as one call (one transaction): under load a send, an acknowledgement
    or a release costs a fraction of a commit. Callers hand over one item or a run of
    them (the frames of one read). `lazy`: the calls are answered once committed, without
    waiting for the disk (`Gateway.call_lazy`), and their caller waits for nothing but the
    answer: so a batch waits one more turn of the event loop, gathering what the next
    reads bring (consumers' acknowledgements, one a read where each holds one message: a
    tenth more messages a second for SQLite at durability=full)."""

    def __init__(
        self,
        gateway: Gateway,
        fn: Callable[[list[In]], list[R | Exception]],
        limit: int = 100,
        *,
        lazy: bool = False,
    ) -> None:
        self.gateway = gateway
        self.fn = fn
        self.limit = limit
        self.call = gateway.call_lazy if lazy else gateway.call
        self.lazy = lazy
        self.pending: deque[tuple[list[In], asyncio.Future[list[R | Exception]]]] = deque()
        self.running = False

    async def __call__(self, item: In) -> R:
        [result] = await self.many([item])
        if isinstance(result, Exception):
            raise result
        return result

    async def many(self, items: list[In]) -> list[R | Exception]:
        """Each item's result, or the exception it met. Where no batch is in the store (and
        the calls are not lazy), these items go in at once as a batch of their own, on the
        caller's task; what other callers hand over meanwhile is gathered for the next."""
        if self.running or self.lazy:
            future: asyncio.Future[list[R | Exception]] = asyncio.get_running_loop().create_future()
            self.pending.append((items, future))
            if not self.running:
                self.running = True
                self.gateway.spawn(self._drain())
            return await future
        self.running = True
        try:
            return await self._store(items)
        finally:
            if self.pending:  # handed over while these were in the store
                self.gateway.spawn(self._drain())
            else:
                self.running = False

    async def _store(self, items: list[In]) -> list[R | Exception]:
        """One store call for `items`: each item's result, or the error of the whole call."""
        try:
            return await self.call(self.fn, items)
        except Exception as exc:
            return [exc] * len(items)

    async def _drain(self) -> None:
        try:
            if self.lazy:
                await asyncio.sleep(0)
            while self.pending:
                runs = [self.pending.popleft()]
                size = len(runs[0][0])
                while self.pending and size + len(self.pending[0][0]) <= self.limit:
                    runs.append(self.pending.popleft())
                    size += len(runs[-1][0])
                results = await self._store([item for run, _ in runs for item in run])
                at = 0
                for run, future in runs:
                    if not future.done():
                        future.set_result(results[at : at + len(run)])
                    at += len(run)
        finally:
            self.running = False


class QueueOps:
    """One queue's batched operations, through its `Queue`."""

    def __init__(self, gateway: Gateway, name: str) -> None:
        self.gateway = gateway
        self.name = name
        self.queue = gateway.client.queue(name)
        # sends may claim for the queue's dispatcher in their own transaction (`_send`)
        self.joined = gateway.client.backend.joined_send_receive
        self.send = Batcher[bytes | tuple[bytes, str], SendResult](gateway, self._send)
        # acknowledgements: committed, not awaited on the disk (`Gateway.call_lazy`)
        self.delete = Batcher[str, None](gateway, self._delete, lazy=True)
        self.visibility = Batcher[tuple[str, float], None](gateway, self._change_visibility)
        # messages claimed and never pushed: back uncounted (`Backend.give_back`)
        self.give_back = Batcher[str, None](gateway, self.queue.give_back)

    def _send(self, items: list[bytes | tuple[bytes, str]]) -> list[SendResult | Exception]:
        """Gathered sends as one store call; a message refused alone gets its error."""
        results: list[SendResult | Exception | None] = []
        ready: list[tuple[int, Send]] = []
        queue = self.queue
        for i, item in enumerate(items):
            try:
                if isinstance(item, tuple):
                    ready.append((i, queue.sending([item[0]], ids=[item[1]])))
                else:
                    ready.append((i, queue.sending([item])))
                results.append(None)
            except ConveyorError as exc:  # refused alone; the others go on
                results.append(exc)
        if ready:
            op = Send.joined([op for _, op in ready])
            gw = self.gateway
            # (the dispatcher's state is read on the event loop's thread alone: where the
            # store writes on it, as SQLite's)
            loop = running_loop() if self.joined else None
            dispatcher = gw.dispatchers.get(self.name) if loop is not None else None
            want = dispatcher.wants(len(op)) if dispatcher is not None else 0
            if loop is not None and want:  # its dispatcher waits; consumers have room
                at = time.monotonic()
                done, raw = queue.run_send_receive(op, want, gw.config.ack_timeout)
                if raw:  # pushed once committed, as the sends wait for the disk
                    claimed = [(decode_message(m), at) for m in raw]
                    loop.call_soon(gw.hand, self.name, claimed)
            else:
                done = queue.run_send(op)
            for (i, _), result in zip(ready, done.results, strict=True):
                results[i] = result
        return cast(list[SendResult | Exception], results)

    def _delete(self, receipts: list[str]) -> list[Exception | None]:
        return self.queue.run_delete(self.queue.deleting(receipts, most=None))

    def _change_visibility(self, changes: list[tuple[str, float]]) -> list[Exception | None]:
        queue = self.queue
        return queue.run_change_visibility(queue.changing_visibility(changes, most=None))

    def receive(self, max_messages: int, visibility_timeout: float) -> list[Message]:
        return [decode_message(m) for m in self.queue.claim(max_messages, visibility_timeout)]


class Load:
    """How busy this process is: the share of a core it used over the last `window`
    seconds (measured again at most once a `window`; a look after a longer while starts a
    new window). Busy from `BUSY` up: what the gateway spends taking in a producer's
    messages it no longer has for pushing them, and flow control gives it to the pushes."""

    BUSY = 0.5

    def __init__(
        self,
        window: float = 0.02,
        clock: Callable[[], float] = time.monotonic,
        cpu: Callable[[], float] = time.process_time,
    ) -> None:
        self.window = window
        self.clock = clock
        self.cpu = cpu
        self.at, self.used = clock(), cpu()
        self.share = 0.0

    def busy(self) -> bool:
        now = self.clock()
        span = now - self.at
        if span >= self.window:
            used = self.cpu()
            # a span of several windows since the last look says little of the last one
            self.share = (used - self.used) / span if span < 4 * self.window else 0.0
            self.at, self.used = now, used
        return self.share >= self.BUSY


class Room:
    """The flag a dispatcher waits on for room: set by answers, waited for by its one task
    in one step (an `asyncio.Event` under `wait_for` costs a task, a waiter and three turns
    of the loop a wait, and a dispatcher waits once a message or so with prefetch 1)."""

    __slots__ = ("_set", "_waiter")

    def __init__(self) -> None:
        self._set = False
        self._waiter: asyncio.Future[None] | None = None

    def set(self) -> None:
        self._set = True
        if self._waiter is not None:
            settle(self._waiter, None)

    def clear(self) -> None:
        self._set = False

    async def wait(self, limit: float | None = None) -> bool:
        """Whether it was set, within `limit` seconds (None: no limit)."""
        if self._set:
            return True
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        timer = None if limit is None else loop.call_later(max(0.0, limit), settle, waiter, None)
        try:
            await waiter
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()
        return self._set


class Dispatcher:
    """Receives from one queue and pushes to the consumers `candidates` names: by their
    shares (shares.py) for an app's queue (`weighted`), to whoever has room for a consumer's
    own topic queue."""

    def __init__(
        self,
        gateway: Gateway,
        queue: str,
        candidates: Callable[[], list[Peer]],
        *,
        weighted: bool = True,
    ) -> None:
        self.gateway = gateway
        self.queue = queue
        self.candidates = candidates
        self.weighted = weighted
        self.room = Room()
        self.task: asyncio.Task[None] | None = None
        self.stopped = False
        # claimed ahead of room, each with when it was claimed (time.monotonic): pushed as
        # consumers answer, without a store call each (ahead())
        self.ahead: deque[tuple[Message, float]] = deque()
        # the queue's change token read before a claim that took all there was: the next
        # claim waits for a change after it first (`_receive`)
        self.drained: int | None = None
        # when the last claim came back full, and the consumers' windows it claimed for
        self.full_at: tuple[float, int] | None = None
        # waiting in a long poll of the queue (not claiming): a send here may claim for it
        # (`wants`, `hand`)
        self.waiting = False
        self.most = min(CLAIM_MOST, gateway.client.backend.batch_limit)
        # flow control (`give_way`): the messages this gateway stored for the queue since a
        # claim last found it drained, less those pushed since (what producers here are
        # ahead by)
        self.lead = 0
        self.moved = asyncio.Event()  # set once `lead` is down to the flow_backlog again

    def start(self) -> None:
        self.task = asyncio.create_task(self._run(), name=f"dispatch {self.queue}")

    def stop(self) -> None:
        self.stopped = True
        self.room.set()
        self.moved.set()  # a producer held for this queue's pushes goes on
        if self.task is not None:
            self.task.cancel()
        self._release_ahead()

    def take_ahead(self) -> list[Message]:
        """The messages claimed ahead, handed over (to be released by the caller)."""
        taken = [message for message, _ in self.ahead]
        self.ahead.clear()
        return taken

    def _release_ahead(self, keep_after: float | None = None) -> None:
        """Make the messages claimed ahead visible again (those claimed before `keep_after`
        alone, where given)."""
        while self.ahead and (keep_after is None or self.ahead[0][1] < keep_after):
            message, _ = self.ahead.popleft()
            self.gateway.spawn(self.gateway.release_message(self.queue, message, pushed=False))

    def stored(self, n: int) -> None:
        """`n` messages were stored for this queue here (flow control's count)."""
        self.lead += n

    def wants(self, n: int) -> int:
        """How many of `n` messages a send here should claim for this dispatcher in its own
        transaction (`QueueOps`, then `hand`): as many as its consumers have room for where
        it waits in a long poll of the queue (its last claim found nothing more), else 0.
        That saves a claim's transaction a message while consumers keep up."""
        if not self.waiting or self.ahead or self.stopped:
            return 0
        return len(self.plan(min(n, self.most)))

    def hand(self, claimed: list[tuple[Message, float]]) -> None:
        """Messages a send here claimed for this dispatcher (`wants`), each with when
        (time.monotonic), once committed: pushed now to who takes them. Where room went
        meanwhile, the rest wait ahead, and the long poll ends so that the dispatcher
        pushes them as room frees up. (Flow control's count: the send counts them as
        stored once it is answered, after this.)"""
        lead = self.lead
        self.lead = lead - self._push(claimed)
        if self.ahead and self.waiting:
            self.gateway.ops(self.queue).queue.notify()

    async def give_way(self) -> None:
        """Flow control (`GatewayConfig.flow_backlog`): return once at most `flow_backlog` of
        the messages stored here wait to be pushed, or once the gateway's process is no
        longer busy (its consumers, not the gateway, are then the limit), or after
        `flow_wait` seconds."""
        config, load = self.gateway.config, self.gateway.load
        deadline = time.monotonic() + config.flow_wait
        while self.lead > config.flow_backlog and not self.stopped and load.busy():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self.moved.clear()
            # woken as the pushes catch up; every few of the load's windows to look at it
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(left, 4 * load.window)):
                    await self.moved.wait()

    def capacity(self) -> int:
        """How many messages the consumers could hold at once: how far to claim ahead."""
        return sum(p.prefetch for p in self.candidates() if p.alive)

    def plan(self, most: int) -> list[Peer]:
        """Who takes each of the next `most` messages (shares.plan); for a topic queue, its
        consumer while it has room."""
        peers = self.candidates()
        if self.weighted:
            return shares.plan(peers, most)
        return [p for p in peers if p.alive for _ in range(min(p.free, most))][:most]

    async def _receive(self, ops: QueueOps, max_messages: int) -> list[Message]:
        """A long poll (`long_poll_async`), which ends with nothing when the dispatcher or
        the gateway stops. Where the last claim took all there was, it first waits (up to
        the store's poll interval) for a change after that claim began: a send in this
        process wakes it at once, and consumers with room left after each push cost no
        claim that finds nothing."""
        gw = self.gateway
        backend = gw.client.backend
        drained, self.drained = self.drained, None
        since = 0

        async def claim() -> list[Message]:
            nonlocal since
            since = ops.queue.change_token()  # read before each claim
            self.waiting = False
            try:
                return await gw.call(ops.receive, max_messages, gw.config.ack_timeout)
            finally:
                self.waiting = True

        def stopping() -> bool:  # (or a send here claimed more than there was room for)
            return self.stopped or gw.closing or bool(self.ahead)

        self.waiting = True
        try:
            if drained is not None:
                await ops.queue.wait_async(drained, backend.poll_interval)
                if self.ahead:  # handed over (`hand`) while it waited: pushed first
                    self.drained = drained
                    return []
            messages = await long_poll_async(ops.queue, RECEIVE_WAIT, claim, stopping)
        finally:
            self.waiting = False
        if len(messages) < max_messages:
            self.drained = since
            self.lead = 0  # nothing is waiting in the store: producers are not ahead
            self.moved.set()
        return messages

    async def _wait_for_room(self, limit: float | None = None) -> None:
        """Nobody can take a message now: wait for room (at most `limit` seconds). Where the
        consumer whose turn it is (an app's queue) has had none for the stall time, the
        others go on without it. (Called, not wrapped in a task: the flag is cleared before
        anything else runs, so no answer that frees room can come in between unseen.)"""
        self.room.clear()
        owed = shares.owed(self.candidates()) if self.weighted else None
        stall = self.gateway.config.stall_timeout
        if owed is None or (limit is not None and limit < stall):
            await self.room.wait(limit)
            return
        if not await self.room.wait(stall) and owed.alive and owed.free <= 0:
            owed.stalled = True
            log.info(
                "consumer %s of app %s answers too slowly for its share (no room for"
                " %.1f s); the others go on without it until it answers",
                owed.id, owed.app, self.gateway.config.stall_timeout,
            )  # fmt: skip

    async def _run(self) -> None:
        gw = self.gateway
        ops = gw.ops(self.queue)
        most = self.most
        failures = 0
        keep = gw.config.ack_timeout / 2
        while not self.stopped and not gw.closing:
            # what was claimed ahead goes first, while at least half its ack_timeout is left
            # (its visibility in the store runs from the claim)
            now = time.monotonic()
            self._release_ahead(keep_after=now - keep)
            # how many of those ahead (or whether one) someone takes now: a plan costs a step
            # a turn, so no more turns are planned than could be used
            planned = len(self.plan(max(1, len(self.ahead))))
            if planned <= 0:
                if not self.ahead:
                    await self._wait_for_room()
                    continue
                if self.capacity() == 0:  # nobody left to take them
                    self._release_ahead()
                    continue
                await self._wait_for_room(limit=self.ahead[0][1] + keep - now)  # or it goes back
                continue
            if self.ahead:
                batch = [self.ahead.popleft() for _ in range(min(planned, len(self.ahead)))]
                self._push(batch)
                continue
            try:
                # a round's worth for every consumer (QUICK_ROUNDS where they took the last
                # full claim quickly; at most `most`; never fewer than there are turns, which
                # their rooms bound): the rooms that free up next are filled from here, not
                # by a transaction each
                capacity = self.capacity()
                full = self.full_at
                quick = full is not None and now - full[0] < QUICK_ROUND and full[1] == capacity
                wanted = min(most, capacity * (QUICK_ROUNDS if quick else 1))
                messages = await self._receive(ops, wanted)
                self.full_at = (time.monotonic(), capacity) if len(messages) == wanted else None
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                if failures == 1 or failures % 60 == 0:
                    log.warning("receiving from %s failed: %s; retrying", self.queue, exc)
                await asyncio.sleep(min(5.0, 0.1 * 2**failures))
                continue
            claimed = time.monotonic()
            self._push([(m, claimed) for m in messages])

    def _push(self, batch: list[tuple[Message, float]]) -> int:
        """Push claimed messages to who takes them, decided now (consumers may have come,
        gone or answered meanwhile); the rest wait ahead for room, or go back to the queue
        when the dispatcher stops. How many it pushed."""
        gw = self.gateway
        takers = self.plan(len(batch)) if batch else []
        peers = self.candidates()
        weighted = self.weighted and shares.weights_count(peers)  # once for the batch
        someone = len(batch) <= len(takers) or self.capacity() > 0  # to take what is left
        for i, (message, claimed) in enumerate(batch):
            if self.stopped or gw.closing:
                gw.spawn(gw.release_message(self.queue, message, pushed=False))
                continue
            if i >= len(takers):
                if someone:
                    self.ahead.append((message, claimed))
                else:  # nobody to take it: back to the queue for the next consumer
                    gw.spawn(gw.release_message(self.queue, message, pushed=False))
                continue
            peer = takers[i]
            if self.weighted:
                shares.took(peer, weighted)
            # the store's visibility runs from the claim: so does the consumer's ack_timeout
            gw.deliveries.deliver(
                Delivery(self.queue, message, peer, claimed + gw.config.ack_timeout)
            )
        if takers:
            self.lead = max(0, self.lead - len(takers))
            if self.lead <= gw.config.flow_backlog:
                self.moved.set()
        return min(len(takers), len(batch))
