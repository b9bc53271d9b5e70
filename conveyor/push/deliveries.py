"""The push gateway's deliveries: messages pushed to a consumer and awaiting its answer (by
message id, and in deadline order for the ack window's end), and the answers: `arrived`
holds a message for its consumer, `ack` deletes it (the acknowledgements of one queue in one
store call), `reject` delivers it again or, past `retry_times`, dead-letters it, `error`
dead-letters it at once."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import TYPE_CHECKING

from .. import tracing
from ..exceptions import (
    ConveyorError,
    InvalidInput,
    NotFound,
    ReceiptHandleInvalid,
    Unsupported,
)
from ..models import Capability
from . import dialling
from .codec import ACK_ANSWER, Frame, encode_push, resp
from .connections import INTERNAL
from .peers import Connection, Delivery, Peer

if TYPE_CHECKING:
    from .gateway import Gateway

log = logging.getLogger("conveyor.push")


class Deliveries:
    """The gateway's messages awaiting their consumers' answers, and the answers."""

    def __init__(self, gateway: Gateway) -> None:
        self.gw = gateway
        self.waiting: dict[str, list[Delivery]] = {}  # msgid -> deliveries awaiting answers
        self.expiring: deque[Delivery] = deque()  # the same, in deadline order

    def take_all(self) -> list[Delivery]:
        """Every delivery awaiting an answer, no longer awaited (the gateway is stopping)."""
        pending = [d for ds in self.waiting.values() for d in ds]
        self.waiting.clear()
        return pending

    def deliver(self, delivery: Delivery) -> None:
        peer = delivery.peer
        stale = peer.deliveries.pop(delivery.msgid, None)
        if stale is not None:
            self.forget(stale)
        peer.deliveries[delivery.msgid] = delivery
        self.waiting.setdefault(delivery.msgid, []).append(delivery)
        self.gw.stats["pushed"] += 1
        if tracing.active() is not None:  # from the push to the consumer's answer
            delivery.span = tracing.begin(
                f"deliver {delivery.queue}",
                "consumer",
                parent=tracing.context_of(delivery.message),
                attributes={
                    **tracing.messaging("deliver", delivery.queue, self.gw.client.backend.scheme),
                    "messaging.message.id": delivery.msgid,
                    "messaging.consumer.group.name": peer.app,
                    "messaging.client.id": peer.id,
                },
            )
        frame = encode_push(peer.app, delivery.msgid, delivery.message.body)
        if peer.connection is not None:
            peer.connection.write(frame)
        else:
            self.gw.spawn(dialling.dial_push(self.gw, delivery, frame))
        self.expiring.append(delivery)

    async def expire(self) -> None:
        """Free a consumer's slot when its time to answer a message ends (the message is
        visible again then, and goes to whoever has room). Deliveries are in deadline
        order; one whose deadline `arrived` moved goes to the back."""
        while not self.gw.closing:
            await asyncio.sleep(0.5)
            now = time.monotonic()
            while self.expiring and self.expiring[0].deadline <= now:
                delivery = self.expiring.popleft()
                found = self.waiting.get(delivery.msgid)
                if not found or delivery not in found:
                    continue  # answered
                if delivery.deadline > now:
                    self.expiring.append(delivery)
                    continue
                tracing.end(delivery.span, "the consumer did not answer in time")
                delivery.span = None
                self.forget(delivery)
                if delivery.peer.deliveries.get(delivery.msgid) is delivery:
                    del delivery.peer.deliveries[delivery.msgid]
                self.gw.room(delivery.peer)

    def forget(self, delivery: Delivery) -> bool:
        found = self.waiting.get(delivery.msgid)
        if not found or delivery not in found:
            return False
        found.remove(delivery)
        if not found:
            del self.waiting[delivery.msgid]
        if delivery.span is not None:
            tracing.end(delivery.span)
            delivery.span = None
        return True

    def _find(self, conn: Connection, frame: Frame) -> Delivery | None:
        if conn.peer is not None:
            mine = conn.peer.deliveries.get(frame.msgid)
            if mine is not None:
                return mine
        found = self.waiting.get(frame.msgid) or []
        if frame.appid:
            found = [d for d in found if d.peer.app == frame.appid]
        return found[0] if found else None

    async def answer_run(self, conn: Connection, frames: list[Frame]) -> list[bytes]:
        """Answers to consumers' answers that came together: acknowledgements of one queue
        are deleted by one store call."""
        answers: list[bytes] = [b""] * len(frames)
        acks: dict[str, list[tuple[int, Delivery]]] = {}
        freed: set[Peer] = set()
        for k, frame in enumerate(frames):
            if not frame.msgid:
                answers[k] = resp("error", f"{frame.type} needs the msgid it answers")
                continue
            delivery = self._find(conn, frame)
            if delivery is None:
                answers[k] = resp(
                    "error",
                    f"no message {frame.msgid[:128]!r} is awaiting an answer: it was answered,"
                    " or its ack_timeout passed and it is being delivered again",
                    msgid=frame.msgid,
                )
                continue
            if frame.type == "arrived":  # held for this consumer until its ack_timeout
                answers[k] = ACK_ANSWER(frame.msgid)
                continue
            self._settle(delivery, wake=False)
            freed.add(delivery.peer)
            if frame.type == "ack":
                acks.setdefault(delivery.queue, []).append((k, delivery))
                continue
            try:
                await self._refuse(frame, delivery)
                answers[k] = ACK_ANSWER(frame.msgid)
            except ReceiptHandleInvalid:
                answers[k] = self._not_held(frame)
            except ConveyorError as exc:
                answers[k] = resp("error", str(exc), msgid=frame.msgid)
        for peer in freed:
            self.gw.room(peer)
        for queue, run in acks.items():
            results = await self.gw.ops(queue).delete.many([d.receipt for _, d in run])
            for (k, _), result in zip(run, results, strict=True):
                if result is None:
                    self.gw.stats["acked"] += 1
                    answers[k] = ACK_ANSWER(frames[k].msgid)
                elif isinstance(result, ReceiptHandleInvalid):
                    answers[k] = self._not_held(frames[k])
                elif isinstance(result, ConveyorError):
                    answers[k] = resp("error", str(result), msgid=frames[k].msgid)
                else:
                    log.error("deleting an acknowledged message of %s failed: %r", queue, result)
                    answers[k] = resp(
                        "error",
                        INTERNAL,
                        msgid=frames[k].msgid,
                    )
        return answers

    async def _refuse(self, frame: Frame, delivery: Delivery) -> None:
        """A `reject` (delivered again, or dead-lettered past `retry_times`) or an `error`."""
        if frame.type == "reject" and delivery.message.receive_count <= self.gw.config.retry_times:
            await self.gw.ops(delivery.queue).visibility(
                (delivery.receipt, self.gw.config.retry_delay)
            )
            self.gw.stats["rejected"] += 1
            return
        why = "rejected" if frame.type == "reject" else "failed"
        await self._dead_letter(delivery, f"{why} by consumer {delivery.peer.id}")
        self.gw.stats["dead"] += 1

    @staticmethod
    def _not_held(frame: Frame) -> bytes:
        return resp(
            "error",
            f"message {frame.msgid} is no longer held for this answer (its ack_timeout"
            " passed, or it was removed)",
            msgid=frame.msgid,
        )

    def _settle(self, delivery: Delivery, *, wake: bool = True) -> None:
        """The consumer answered for good: its slot is free (`wake`: tell its dispatchers
        now; else the caller does, once for many)."""
        self.forget(delivery)
        peer = delivery.peer
        if peer.deliveries.get(delivery.msgid) is delivery:
            del peer.deliveries[delivery.msgid]
        if wake:
            self.gw.room(peer)

    async def _dead_letter(self, delivery: Delivery, error: str) -> None:
        queue = self.gw.client.queue(delivery.queue)
        info = await self.gw.call(self.gw.client.queue_info, delivery.queue)
        policy = info.attributes.dead_letter
        if policy is None:
            raise InvalidInput(
                f"queue {delivery.queue} has no dead-letter queue; the message stays (set one"
                " with `conveyor queue set`)"
            )
        if Capability.EDIT_IN_PLACE in self.gw.client.capabilities:
            # in place, atomically: id, body and attributes kept, the source recorded
            try:
                await self.gw.call(queue.move_to_dlq, delivery.msgid, error)
                return
            except NotFound as exc:
                raise ReceiptHandleInvalid(str(exc)) from exc
            except Unsupported:
                pass
        # a copy first, then the original: at worst a copy too many, never a loss
        dead = self.gw.client.queue(policy.queue)
        await self.gw.call(dead.send, delivery.message.body, attributes=delivery.message.attributes)
        await self.gw.call(queue.delete, delivery.receipt)
