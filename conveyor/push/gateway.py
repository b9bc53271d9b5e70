"""The push gateway: SKMQ's TCP protocol over any store, on asyncio.

Producers send `queue` and `topic` frames; the gateway stores them in the app's queue (the
queue named by `appid`) or publishes them to the app's topic, and answers `resp`. Consumers
register (`register`, JSON `{"id", "app_id", "host", "port", "weight"}`) and get messages
pushed (`push`), which they answer `arrived`, `ack`, `reject` or `error`.

Delivery works in two ways:

- on the consumer's own connection: a consumer that registers without a host and port gets
  its pushes on the connection it registered on (works behind NAT; what `PushConsumer`
  does);
- SKMQ's way: a consumer that registers a host and port listens there; the gateway dials
  it for each message, pushes, and replies to its answers on that connection, which stays
  open after `arrived` for the rest of the ack window (the `ack` may come on it, or later on
  any connection to the gateway).

Each app queue has one dispatcher: a long-polling receive (woken by sends, never a polling
sleep) whose messages the consumers share by weight (shares.py), each holding at most its
window of unanswered messages. A pushed message is invisible for `ack_timeout`:
without an answer it is delivered again. `reject` releases it for another delivery, and once
it has been delivered more than `retry_times` times, to the app's dead-letter queue
(`<appid>-dlq`); `error` dead-letters it at once. Topic messages reach every consumer
registered on the app: each consumer has a queue of its own (`<appid>-to-<id>`) subscribed to
the app's topic, and a dispatcher that pushes only to it.

Consumers silent for `heartbeat_interval` are pinged; one that does not answer within
`heartbeat_timeout`, or whose connection drops, is removed and its unanswered messages are
released at once for the others; its topic queue goes. Registered consumers are entered in
the store's consumer registry while they are there.

This module holds the gateway's state and what it does with frames: sends and
registrations. The rest is by concept: connections.py (accepting and reading connections),
codec.py (frames and answers), dispatch.py (claiming and sharing messages), deliveries.py
(pushes awaiting their answers, and the answers),
dialling.py (pushing to a consumer by dialling it), heartbeats.py, registry.py (the store's
consumer registry), peers.py (connections, apps, consumers, deliveries) and shares.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import hmac
import logging
import math
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from ..aio import offload_lazy_to, offload_to
from ..client import Client
from ..exceptions import (
    ConveyorError,
    InvalidInput,
    NotFound,
    QueueDoesNotExist,
)
from ..models import Capability, DeadLetterPolicy, Message
from ..validation import NAME_RE, parse_json_text
from . import connections, heartbeats, shares
from .codec import (
    ACK_SENT,
    ANSWERS,
    PONG,
    SEND_TYPES,
    Frame,
    encode,
    resp,
)
from .config import GatewayConfig, server_tls
from .connections import INTERNAL
from .deliveries import Deliveries
from .dispatch import Dispatcher, Load, QueueOps
from .peers import App, Connection, Peer, parse_peer
from .registry import ConsumerRegistry

log = logging.getLogger("conveyor.push")

T = TypeVar("T")


def dlq_name(app: str) -> str:
    return f"{app[:76]}-dlq"


def topic_queue_name(app: str, consumer_id: str) -> str:
    """The queue that holds an app's topic messages for one consumer."""
    name = f"{app}-to-{consumer_id}"
    if NAME_RE.fullmatch(name):
        return name
    digest = hashlib.sha256(consumer_id.encode()).hexdigest()[:16]
    return f"{app[:60]}-to-{digest}"


class Gateway:
    """The SKMQ push gateway over a `Client`. `await start()`, then `await close()`."""

    def __init__(self, client: Client, config: GatewayConfig | None = None) -> None:
        self.client = client
        self.config = config or GatewayConfig()
        self.apps: dict[str, App] = {}
        self.queues_ready: set[str] = set()
        self.dispatchers: dict[str, Dispatcher] = {}
        self.connections: set[Connection] = set()
        # of those, the ones not yet authenticated, longest waiting first
        self.unauthenticated: dict[Connection, None] = {}
        self.tasks: set[asyncio.Task[Any]] = set()
        self.queue_ops: dict[str, QueueOps] = {}
        # a store that makes one write at a time: more threads would only wait on its lock
        threads = 1 if client.backend.one_writer else 8
        self.executor = ThreadPoolExecutor(threads, thread_name_prefix="push-store")
        self.server: asyncio.Server | None = None
        self.closing = False
        self.stats = {
            "received": 0,
            "pushed": 0,
            "acked": 0,
            "rejected": 0,
            "dead": 0,
            "held": 0,  # producers' reads held by flow control
        }
        self._held_said: dict[str, float] = {}  # when flow control last said so, per app
        self.registry = ConsumerRegistry(client, self.config, self.call)
        self.deliveries = Deliveries(self)
        self.load = Load()  # how busy the gateway's process is: flow control's trigger

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        tls = server_tls(self.config)
        self.server = await asyncio.start_server(
            functools.partial(connections.accept, self),
            self.config.host,
            self.config.port,
            limit=2**20,
            backlog=1024,
            ssl=tls,
            ssl_handshake_timeout=self.config.read_timeout if tls else None,
        )
        self.spawn(heartbeats.heartbeats(self))
        self.spawn(self.deliveries.expire())
        log.info(
            "push gateway listening on %s:%d%s",
            self.config.host,
            self.port,
            " (TLS)" if self.config.tls_cert else "",
        )

    @property
    def port(self) -> int:
        assert self.server is not None and self.server.sockets
        port: int = self.server.sockets[0].getsockname()[1]
        return port

    async def serve_forever(self) -> None:
        assert self.server is not None
        await self.server.serve_forever()

    async def close(self) -> None:
        """Stop accepting and pushing, release every unanswered message, close connections."""
        if self.closing:
            return
        self.closing = True
        if self.server is not None:
            self.server.close()
        peers = [p for app in self.apps.values() for p in app.peers.values()]
        await asyncio.gather(*(self.registry.unenrol(p) for p in peers), return_exceptions=True)
        # what the dispatchers claimed ahead goes back with what is unanswered, now (a task
        # spawned for it would be cancelled below)
        ahead = [(d.queue, m) for d in self.dispatchers.values() for m in d.take_ahead()]
        for dispatcher in self.dispatchers.values():
            dispatcher.stop()
        pending = self.deliveries.take_all()
        for delivery in pending:
            delivery.peer.deliveries.pop(delivery.msgid, None)
        await asyncio.gather(
            *(self.release_message(queue, message, pushed=False) for queue, message in ahead),
            *(self.release_message(d.queue, d.message) for d in pending),
            return_exceptions=True,
        )
        for conn in list(self.connections):
            conn.close()
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.executor.shutdown(wait=True)
        log.info("push gateway stopped")

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """A store call: on the event loop's thread where the store allows it (a SQLite
        send then commits at once and waits for a shared fsync), else in the store pool."""
        return await offload_to(self.executor, self.client.backend, fn, *args, **kwargs)

    async def call_lazy(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """`call` for the deletes of acknowledged messages: answered once committed, without
        waiting for the disk (a SQLite store at durability=full fsyncs them with its next
        durable commit). As RabbitMQ's acknowledgements, which it never fsyncs: a power cut
        before that commit delivers the message again, which at-least-once allows, and a
        consumer's acknowledgements no longer queue for the fsyncs that producers' sends
        wait for."""
        return await offload_lazy_to(self.executor, self.client.backend, fn, *args, **kwargs)

    def ops(self, queue: str) -> QueueOps:
        ops = self.queue_ops.get(queue)
        if ops is None:
            ops = self.queue_ops[queue] = QueueOps(self, queue)
        return ops

    # -- frames -------------------------------------------------------------------------

    async def handle(self, conn: Connection, frame: Frame, out: list[bytes]) -> bool:
        """Answer one frame into `out`; False to close the connection after it."""
        kind = frame.type
        if kind == "ping":
            out.append(encode(PONG))
            return True
        if kind == "pong":
            return True
        if kind == "auth":
            return self._auth(conn, frame.content.decode("utf-8", "replace"), out)
        if kind == "register":
            return await self._register(conn, frame, out)
        if kind == "unregister" and conn.authenticated:
            await self._unregister(conn, frame, out)
            return True
        if not conn.authenticated:
            out.append(resp("error", "authenticate first: send type=auth with the token"))
            return False
        try:
            if kind in SEND_TYPES:
                await self._send(conn, frame, out)
            elif kind in ANSWERS:
                out += await self.deliveries.answer_run(conn, [frame])
            else:
                out.append(
                    resp(
                        "error",
                        f"unknown type {kind[:40]!r}: send queue, topic, register, unregister,"
                        " arrived, ack, reject, error, auth or ping",
                        msgid=frame.msgid,
                    )
                )
        except ConveyorError as exc:
            out.append(
                resp("reject" if kind in SEND_TYPES else "error", str(exc), msgid=frame.msgid)
            )
        return True

    def _auth(self, conn: Connection, token: str, out: list[bytes], *, quiet: bool = False) -> bool:
        """Check a token (in constant time); `quiet`: no reply when it is right (the
        register frame that carried it gets the one reply)."""
        expected = self.config.auth_token
        if expected is None or hmac.compare_digest(token.encode(), expected.encode()):
            conn.authenticated = True
            self.unauthenticated.pop(conn, None)
            if not quiet:
                out.append(resp("ack", "authenticated"))
            return True
        out.append(resp("error", "wrong token"))
        return False

    # -- producers ------------------------------------------------------------------------

    def app(self, name: str) -> App:
        app = self.apps.get(name)
        if app is None:
            if not NAME_RE.fullmatch(name) or len(name) > 76:
                raise InvalidInput(
                    f"appid {name[:80]!r} must be 1-76 letters, digits, '-' or '_'"
                    " (it names the app's queue)"
                )
            app = self.apps[name] = App(name, self.config.rate)
        return app

    async def ensure_queue(self, name: str, dlq: str | None) -> None:
        """Create a queue (and its dead-letter queue) unless it exists; an existing queue
        keeps its own attributes."""
        if name in self.queues_ready:
            return
        try:
            await self.call(self.client.queue_info, name)
        except QueueDoesNotExist:
            options: dict[str, Any] = {}
            if dlq is not None:
                await self.ensure_queue(dlq, None)
                options["dead_letter"] = DeadLetterPolicy(
                    queue=dlq, max_receive_count=self.config.retry_times + 1
                )
            with contextlib.suppress(ConveyorError):  # made by someone else meanwhile
                await self.call(self.client.create_queue, name, **options)
        self.queues_ready.add(name)

    async def ensure_app_queue(self, app: App) -> None:
        await self.ensure_queue(app.name, dlq_name(app.name))
        if app.name not in self.dispatchers:
            dispatcher = Dispatcher(self, app.name, lambda: list(app.peers.values()))
            self.dispatchers[app.name] = dispatcher
            dispatcher.start()

    async def ensure_topic(self, app: App) -> bool:
        if app.topic_ready:
            return True
        if Capability.TOPICS not in self.client.capabilities:
            return False
        await self.call(self.client.create_topic, app.name)
        app.topic_ready = True
        return True

    async def _send(self, conn: Connection, frame: Frame, out: list[bytes]) -> None:
        if frame.type == "queue":
            out += await self.send_run([frame])
            return
        if not frame.appid:
            out.append(
                resp("reject", "appid is missing: it names the app to send to", msgid=frame.msgid)
            )
            return
        app = self.app(frame.appid)
        if not await self._take_token(app, frame, out):
            return
        if not await self.ensure_topic(app):
            out.append(
                resp("reject", "this store has no topics: send type=queue", msgid=frame.msgid)
            )
            return
        msgid = frame.msgid or None
        results = await self.call(self.client.publish, app.name, frame.content, id=msgid)
        self.stats["received"] += 1
        out.append(self._sent(frame, any(r.duplicate for r in results.values())))

    async def _take_token(self, app: App, frame: Frame, out: list[bytes]) -> bool:
        """The app's rate limit: False (and the refusal in `out`) when the frame must wait
        longer than `rate_wait` for its turn."""
        wait = app.bucket.reserve(self.config.rate_wait)
        if wait is None:
            out.append(self._over_rate(app, frame))
            return False
        if wait > 0:
            await asyncio.sleep(wait)
        return True

    def _over_rate(self, app: App, frame: Frame) -> bytes:
        return resp(
            "reject",
            f"rate limit: app {app.name} takes {self.config.rate:g} messages a second;"
            " send more slowly or raise `rate`",
            msgid=frame.msgid,
        )

    def _sent(self, frame: Frame, duplicate: bool) -> bytes:
        if duplicate:
            text = f"message already exists, ID: {frame.msgid}, Status: not acknowledged"
            return resp("ack", text, msgid=frame.msgid)
        return ACK_SENT(frame.msgid)

    async def send_run(self, frames: list[Frame]) -> list[bytes]:
        """Answers to `queue` frames that came together: each app's messages are stored
        by one store call (one transaction), and answered in order. The rate limit takes
        each frame's token as it comes; those that must wait for theirs are stored once the
        last of them may be (at most `rate_wait` later), the rest at once."""
        answers: list[bytes] = [b""] * len(frames)
        now: dict[str, list[int]] = {}
        later: dict[str, list[int]] = {}
        wait_most = 0.0
        for k, frame in enumerate(frames):
            if not frame.appid:
                answers[k] = resp(
                    "reject", "appid is missing: it names the app to send to", msgid=frame.msgid
                )
                continue
            try:
                app = self.app(frame.appid)
            except ConveyorError as exc:
                answers[k] = resp("reject", str(exc), msgid=frame.msgid)
                continue
            wait = app.bucket.reserve(self.config.rate_wait)
            if wait is None:
                answers[k] = self._over_rate(app, frame)
            elif wait > 0:
                later.setdefault(app.name, []).append(k)
                wait_most = max(wait_most, wait)
            else:
                now.setdefault(app.name, []).append(k)
        await self._store_runs(frames, now, answers)
        if later:
            await asyncio.sleep(wait_most)
            await self._store_runs(frames, later, answers)
        return answers

    async def give_way(self, frames: list[Frame]) -> None:
        """Flow control after a run of sends (`GatewayConfig.flow_backlog`): where the
        gateway's process is busy and behind with an app's pushes, the producer's next
        frames wait for the pushes to catch up."""
        backlog = self.config.flow_backlog
        if backlog <= 0 or not self.load.busy():
            return
        for name in {frame.appid for frame in frames}:
            dispatcher = self.dispatchers.get(name)
            if dispatcher is not None and dispatcher.lead > backlog:
                self.stats["held"] += 1
                now = time.monotonic()
                if now - self._held_said.get(name, -math.inf) >= 60:
                    self._held_said[name] = now
                    log.info(
                        "flow control: producers of app %s wait for its pushes (%d stored"
                        " and not yet pushed, flow_backlog %d): its consumers take fewer"
                        " than its producers send while the gateway is busy",
                        name, dispatcher.lead, backlog,
                    )  # fmt: skip
                await dispatcher.give_way()

    async def _store_runs(
        self, frames: list[Frame], runs: dict[str, list[int]], answers: list[bytes]
    ) -> None:
        """Store each app's run of frames (indexes into `frames`) and set their answers."""
        for name, run in runs.items():
            try:
                await self.ensure_app_queue(self.apps[name])
            except ConveyorError as exc:
                for k in run:
                    answers[k] = resp("reject", str(exc), msgid=frames[k].msgid)
                continue
            items: list[bytes | tuple[bytes, str]] = [
                (frames[k].content, frames[k].msgid) if frames[k].msgid else frames[k].content
                for k in run
            ]
            results = await self.ops(name).send.many(items)
            stored = 0
            for k, result in zip(run, results, strict=True):
                if isinstance(result, ConveyorError):
                    answers[k] = resp("reject", str(result), msgid=frames[k].msgid)
                elif isinstance(result, Exception):
                    log.error("storing a message of app %s failed: %r", name, result)
                    answers[k] = resp(
                        "error",
                        INTERNAL,
                        msgid=frames[k].msgid,
                    )
                else:
                    self.stats["received"] += 1
                    if not result.duplicate:
                        stored += 1
                    answers[k] = self._sent(frames[k], result.duplicate)
            dispatcher = self.dispatchers.get(name)
            if dispatcher is not None:
                dispatcher.stored(stored)

    def hand(self, queue: str, claimed: list[tuple[Message, float]]) -> None:
        """Messages a send claimed for the queue's dispatcher (`Dispatcher.wants`), each with
        when: to it, or back to the queue where it has gone meanwhile."""
        dispatcher = self.dispatchers.get(queue)
        if dispatcher is None or dispatcher.stopped:
            for message, _ in claimed:
                self.spawn(self.release_message(queue, message, pushed=False))
            return
        dispatcher.hand(claimed)

    # -- consumers ------------------------------------------------------------------------

    async def _register(self, conn: Connection, frame: Frame, out: list[bytes]) -> bool:
        text = frame.content.decode("utf-8", "replace")
        try:
            info = parse_json_text(text)
            if not isinstance(info, dict):
                raise ValueError
        except ValueError:
            out.append(resp("reject", f"Invalid parameters: {text[:200]} (give a JSON object)"))
            return True
        token = info.get("token")
        if not conn.authenticated:
            if not isinstance(token, str):
                out.append(resp("error", 'authenticate first: give "token" in the JSON'))
                return False
            if not self._auth(conn, token, out, quiet=True):
                return False
        try:
            peer = parse_peer(conn, info, self.config.prefetch)
        except InvalidInput as exc:
            out.append(resp("reject", f"Invalid parameters: {exc}"))
            return True
        try:
            app = self.app(peer.app)
            await self.ensure_app_queue(app)
            if await self.ensure_topic(app):
                peer.topic_queue = topic_queue_name(app.name, peer.id)
                await self.ensure_queue(peer.topic_queue, dlq_name(app.name))
                await self.call(self.client.subscribe, app.name, peer.topic_queue)
        except ConveyorError as exc:
            out.append(resp("reject", f"Invalid parameters: {exc}"))
            return True
        old = app.peers.get(peer.id)
        if old is not None:
            peer.share_pass = old.share_pass  # its place in the shares, kept
            await self.drop(old, "it registered again", again=True)
        else:
            shares.joined(peer, app.peers.values())
        app.peers[peer.id] = peer
        if peer.connection is not None:
            if conn.peer is not None and conn.peer is not peer:
                await self.drop(conn.peer, "its connection registered another consumer")
            conn.peer = peer
        if peer.topic_queue is not None:
            dispatcher = Dispatcher(
                self, peer.topic_queue, lambda: [peer] if peer.alive else [], weighted=False
            )
            self.dispatchers[peer.topic_queue] = dispatcher
            dispatcher.start()
        self.spawn(self.registry.enrol(peer))
        self.room(peer)
        log.info(
            "consumer %s registered on app %s (weight %d, %s)",
            peer.id,
            app.name,
            peer.weight,
            f"dialled at {peer.host}:{peer.port}"
            if peer.connection is None
            else f"pushed to its connection from {conn.address}",
        )
        out.append(resp("ack", "Recipient register successful."))
        return True

    async def _unregister(self, conn: Connection, frame: Frame, out: list[bytes]) -> None:
        """A consumer leaves: the one registered on this connection, or the one its content
        names (JSON `{"id", "app_id"}`, for a consumer the gateway dials)."""
        peer = conn.peer
        text = frame.content.decode("utf-8", "replace").strip()
        if text:
            try:
                info = parse_json_text(text)
                pid, app = info.get("id"), info.get("app_id")
                if not isinstance(pid, str) or not isinstance(app, str):
                    raise ValueError
            except (ValueError, AttributeError):
                out.append(resp("reject", 'Invalid parameters: give {"id", "app_id"}'))
                return
            found = self.apps.get(app)
            peer = found.peers.get(pid) if found is not None else None
        if peer is None:
            out.append(resp("error", "no such consumer is registered"))
            return
        if conn.peer is peer:
            conn.peer = None
        await self.drop(peer, "it unregistered")
        out.append(resp("ack", "Recipient unregister successful."))

    def room(self, peer: Peer) -> None:
        """A consumer has room again: wake the dispatchers that push to it (a consumer that
        was passed over for answering too slowly takes its turns again)."""
        if peer.stalled:
            app = self.apps.get(peer.app)
            shares.resumed(peer, app.peers.values() if app is not None else ())
        for name in (peer.app, peer.topic_queue):
            dispatcher = self.dispatchers.get(name) if name else None
            if dispatcher is not None:
                dispatcher.room.set()

    async def drop(self, peer: Peer, why: str, *, again: bool = False) -> None:
        """Remove a consumer; its unanswered messages go back to their queues now. Unless it
        registered `again`, the queue of its topic copies goes (and the copies with it: they
        were for this consumer alone), and so does its entry in the consumer registry."""
        if not peer.alive:
            return
        peer.alive = False
        app = self.apps.get(peer.app)
        if app is not None and app.peers.get(peer.id) is peer:
            del app.peers[peer.id]
        if peer.topic_queue is not None:
            dispatcher = self.dispatchers.get(peer.topic_queue)
            if dispatcher is not None and peer not in dispatcher.candidates():
                dispatcher.stop()
                del self.dispatchers[peer.topic_queue]
        pending = list(peer.deliveries.values())
        peer.deliveries.clear()
        for delivery in pending:
            self.deliveries.forget(delivery)
        log.info(
            "consumer %s of app %s removed: %s; %d unanswered message(s) released",
            peer.id, peer.app, why, len(pending),
        )  # fmt: skip
        await asyncio.gather(
            *(self.release_message(d.queue, d.message) for d in pending), return_exceptions=True
        )
        if again or self.closing:  # (a gateway that closes leaves the registry itself)
            return
        if peer.topic_queue is not None:
            await self._remove_topic_queue(peer)
        await self.registry.unenrol(peer)

    async def _remove_topic_queue(self, peer: Peer) -> None:
        """The queue that held a gone consumer's topic copies is of no more use."""
        assert peer.topic_queue is not None
        name = peer.topic_queue
        app = self.apps.get(peer.app)
        if app is not None and peer.id in app.peers:
            return  # registered again meanwhile
        try:
            with contextlib.suppress(NotFound):
                await self.call(self.client.unsubscribe, peer.app, name)
            with contextlib.suppress(QueueDoesNotExist):
                await self.call(self.client.delete_queue, name)
        except ConveyorError as exc:
            log.warning("could not remove %s, the topic queue of %s: %s", name, peer.id, exc)
            return
        self.queues_ready.discard(name)
        self.queue_ops.pop(name, None)

    async def release_message(self, queue: str, message: Message, *, pushed: bool = True) -> None:
        """Make a message received for a consumer visible again now: one `pushed` to a
        consumer with its delivery counted (it may have been handled; a consumer that
        rejects it, or dies holding it, brings it nearer the dead-letter queue), one
        claimed ahead and never pushed given back uncounted (`Backend.give_back`), so that
        consumers that come and go never use up the deliveries of messages none of them
        saw."""
        if message.receipt is not None:
            ops = self.ops(queue)
            with contextlib.suppress(ConveyorError):
                if pushed:
                    await ops.visibility((message.receipt, 0.0))
                else:
                    await ops.give_back(message.receipt)
