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
  it for each message, pushes, reads its first answer, replies and closes. A later answer
  (`ack` after `arrived`) comes on any connection to the gateway.

Each app queue has one dispatcher: a long-polling receive (woken by sends, never a polling
sleep) whose messages go to the live consumer with room that has the highest
(weight + 1) / assigned, SKMQ's balance. A pushed message is invisible for `ack_timeout`:
without an answer it is delivered again. `reject` releases it for another delivery, and once
it has been delivered more than `retry_times` times, to the app's dead-letter queue
(`<appid>-dlq`); `error` dead-letters it at once. Topic messages reach every consumer
registered on the app: each consumer has a queue of its own (`<appid>-to-<id>`) subscribed to
the app's topic, and a dispatcher that pushes only to it.

Consumers silent for `heartbeat_interval` are pinged; one that does not answer within
`heartbeat_timeout`, or whose connection drops, is removed and its unanswered messages are
released at once for the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from ..aio import offload_to
from ..client import Client
from ..exceptions import (
    ConveyorError,
    InvalidInput,
    NotFound,
    QueueDoesNotExist,
    ReceiptHandleInvalid,
    Unsupported,
)
from ..models import Capability, DeadLetterPolicy, Message, NewMessage, SendResult
from ..queues import RECEIVE, SendEntry, Wait, decode_message, long_poll
from ..validation import NAME_RE
from .codec import PING, PONG, Decoder, Frame, FrameError, encode
from .config import GatewayConfig, server_tls

log = logging.getLogger("conveyor.push")

T = TypeVar("T")
In = TypeVar("In")
R = TypeVar("R")

SEND_TYPES = ("queue", "topic")
ANSWERS = ("arrived", "ack", "reject", "error")
KNOWN_TYPES = (*SEND_TYPES, *ANSWERS, "register", "auth", "ping", "pong", "resp")
CONCURRENT = (*SEND_TYPES, *ANSWERS)  # handled beside the next frames; replies kept in order
MAX_PIPELINED = 1000  # frames of one connection handled at once, at most
RECEIVE_WAIT = 20.0  # seconds a dispatcher's long poll waits before asking again


def resp(status: str, text: str, *, msgid: str = "") -> bytes:
    """A `resp` frame: JSON content with the status (ack, reject or error) and a text."""
    content = json.dumps({"status": status, "content": text}, ensure_ascii=False)
    return encode(Frame(type="resp", msgid=msgid, content=content.encode()))


def dlq_name(app: str) -> str:
    return f"{app[:76]}-dlq"


def topic_queue_name(app: str, consumer_id: str) -> str:
    """The queue that holds an app's topic messages for one consumer."""
    name = f"{app}-to-{consumer_id}"
    if NAME_RE.fullmatch(name):
        return name
    digest = hashlib.sha256(consumer_id.encode()).hexdigest()[:16]
    return f"{app[:60]}-to-{digest}"


class TokenBucket:
    """`rate` tokens a second, up to a second's worth banked (SKMQ's smooth bursty limiter).
    A caller reserves a token and waits the time `reserve` returns."""

    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.capacity = max(1.0, rate)
        self.clock = clock
        self.tokens = self.capacity
        self.at = clock()

    def reserve(self, limit: float) -> float | None:
        """Take a token; the seconds to wait before using it, or None (taking nothing)
        when that would be more than `limit`."""
        if self.rate <= 0:
            return 0.0
        now = self.clock()
        self.tokens = min(self.capacity, self.tokens + (now - self.at) * self.rate)
        self.at = now
        wait = 0.0 if self.tokens >= 1 else (1 - self.tokens) / self.rate
        if wait > limit:
            return None
        self.tokens -= 1
        return wait


class Connection:
    """One TCP connection, either way: frames out, and what the gateway knows of it."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.authenticated = False
        self.peer: Peer | None = None  # the consumer registered on this connection
        self.last_seen = time.monotonic()
        self.pinged_at: float | None = None
        peer = writer.get_extra_info("peername")
        self.address = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)

        # replies in the order their frames came: (frame being handled, or its reply)
        self.replies: deque[tuple[asyncio.Future[list[bytes]] | None, list[bytes] | None]] = deque()
        self.replying: asyncio.Future[None] | None = None

    @property
    def backlog(self) -> int:
        return len(self.replies)

    def write(self, data: bytes) -> None:
        if not self.writer.is_closing():
            self.writer.write(data)

    def reply(self, work: asyncio.Future[list[bytes]] | None, out: list[bytes] | None) -> None:
        """Queue a frame's reply (or the task that makes it) behind the earlier ones."""
        if work is None and not self.replies:
            if out:
                self.write(b"".join(out))
            return
        self.replies.append((work, out))
        if self.replying is None or self.replying.done():
            self.replying = asyncio.ensure_future(self._write_replies())

    async def _write_replies(self) -> None:
        while self.replies:
            work, out = self.replies[0]
            if work is not None:
                out = await work
            self.replies.popleft()
            if out:
                self.write(b"".join(out))

    async def settle(self, below: int) -> None:
        """Wait until fewer than `below` replies are pending (a producer that pipelines
        faster than the store takes its frames is read no further meanwhile)."""
        while len(self.replies) >= below and self.replying is not None:
            await asyncio.wait([self.replying], timeout=1)
            await self.flush()

    async def finish(self) -> None:
        """Write every pending reply."""
        if self.replying is not None:
            await self.replying
        await self.flush()

    async def flush(self) -> None:
        with contextlib.suppress(ConnectionError):
            await self.writer.drain()

    def close(self) -> None:
        if not self.writer.is_closing():
            self.writer.close()


@dataclass(eq=False)
class Delivery:
    """A message pushed to a consumer and not answered yet."""

    queue: str
    message: Message
    peer: Peer
    deadline: float  # time.monotonic() when the consumer's time to answer ends

    @property
    def msgid(self) -> str:
        return self.message.id

    @property
    def receipt(self) -> str:
        assert self.message.receipt is not None
        return self.message.receipt


@dataclass(eq=False)
class Peer:
    """A registered consumer."""

    id: str
    app: str
    weight: int
    prefetch: int
    host: str = ""
    port: int = 0
    connection: Connection | None = None  # pushes go here; None: dial host:port
    assigned: int = 0
    alive: bool = True
    deliveries: dict[str, Delivery] = field(default_factory=dict)  # by msgid
    topic_queue: str | None = None
    checked_at: float = 0.0  # last heartbeat, dialled consumers

    @property
    def free(self) -> int:
        return self.prefetch - len(self.deliveries) if self.alive else 0

    def score(self) -> float:
        return math.inf if self.assigned == 0 else (self.weight + 1) / self.assigned


class App:
    """An application: its queue, dead-letter queue, topic, consumers and rate limit."""

    def __init__(self, name: str, rate: float) -> None:
        self.name = name
        self.peers: dict[str, Peer] = {}
        self.bucket = TokenBucket(rate)
        self.topic_ready = False


class Batcher(Generic[In, R]):
    """Store operations of one kind on one queue, gathered while the previous batch is in
    the store and done as one call (one transaction): under load a send, an acknowledgement
    or a release costs a fraction of a commit."""

    def __init__(
        self, gateway: Gateway, fn: Callable[[list[In]], list[R | Exception]], limit: int = 100
    ) -> None:
        self.gateway = gateway
        self.fn = fn
        self.limit = limit
        self.pending: list[tuple[In, asyncio.Future[R]]] = []
        self.running = False

    async def __call__(self, item: In) -> R:
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self.pending.append((item, future))
        if not self.running:
            self.running = True
            self.gateway.spawn(self._drain())
        return await future

    async def _drain(self) -> None:
        try:
            while self.pending:
                batch = self.pending[: self.limit]
                del self.pending[: self.limit]
                try:
                    results = await self.gateway.call(self.fn, [item for item, _ in batch])
                except Exception as exc:
                    results = [exc] * len(batch)
                for (_, future), result in zip(batch, results, strict=True):
                    if future.done():
                        continue
                    if isinstance(result, Exception):
                        future.set_exception(result)
                    else:
                        future.set_result(result)
        finally:
            self.running = False


class QueueOps:
    """One queue's batched operations, straight on the store."""

    def __init__(self, gateway: Gateway, name: str) -> None:
        self.name = name
        self.queue = gateway.client.queue(name)
        self.backend = gateway.client.backend
        self.send = Batcher[bytes | tuple[bytes, str], SendResult](gateway, self._send)
        self.delete = Batcher[str, None](gateway, self._delete)
        self.visibility = Batcher[tuple[str, float], None](gateway, self._visibility)

    def _send(self, items: list[bytes | tuple[bytes, str]]) -> list[SendResult | Exception]:
        results: list[SendResult | Exception] = []
        ready: list[tuple[int, NewMessage]] = []
        for i, item in enumerate(items):
            body, msgid = item if isinstance(item, tuple) else (item, None)
            try:
                ready.append((i, self.queue.prepare(SendEntry(entry_id="0", body=body, id=msgid))))
                results.append(InvalidInput("not sent"))
            except ConveyorError as exc:  # refused alone; the others go on
                results.append(exc)
        if ready:
            sent = self.backend.send(self.name, [m for _, m in ready])
            for (i, _), result in zip(ready, sent, strict=True):
                results[i] = result
        return results

    def _delete(self, receipts: list[str]) -> list[Exception | None]:
        return list(self.backend.delete(self.name, receipts))

    def _visibility(self, entries: list[tuple[str, float]]) -> list[Exception | None]:
        return list(self.backend.change_visibility(self.name, entries))

    def receive(self, max_messages: int, visibility_timeout: float) -> list[Message]:
        got = self.backend.receive(self.name, max_messages, visibility_timeout)
        return [decode_message(m) for m in got]


class Dispatcher:
    """Receives from one queue and pushes to the consumers `candidates` names."""

    def __init__(self, gateway: Gateway, queue: str, candidates: Callable[[], list[Peer]]) -> None:
        self.gateway = gateway
        self.queue = queue
        self.candidates = candidates
        self.room = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.stopped = False

    def start(self) -> None:
        self.task = asyncio.create_task(self._run(), name=f"dispatch {self.queue}")

    def stop(self) -> None:
        self.stopped = True
        self.room.set()
        if self.task is not None:
            self.task.cancel()

    def pick(self) -> Peer | None:
        ready = [p for p in self.candidates() if p.free > 0]
        return max(ready, key=Peer.score) if ready else None

    async def _receive(self, ops: QueueOps, max_messages: int) -> list[Message]:
        """A long poll: woken by a send in this process, and every `poll_interval` for
        delays ending and other processes' sends; no thread held while it waits."""
        gw = self.gateway
        backend = ops.backend
        poll = long_poll(backend, ops.name, RECEIVE_WAIT)
        step = next(poll)
        try:
            while True:
                if step is RECEIVE:
                    got = await gw.call(ops.receive, max_messages, gw.config.ack_timeout)
                    step = poll.send(got)
                    continue
                assert isinstance(step, Wait)
                if self.stopped or gw.closing:
                    return []
                await backend.wait_for_messages_async(ops.name, step.since, step.remaining)
                step = next(poll)
        except StopIteration as done:
            messages: list[Message] = done.value
            return messages

    async def _run(self) -> None:
        gw = self.gateway
        ops = gw.ops(self.queue)
        failures = 0
        while not self.stopped and not gw.closing:
            room = sum(p.free for p in self.candidates())
            if room <= 0:
                self.room.clear()
                await self.room.wait()
                continue
            try:
                messages = await self._receive(ops, min(room, 10))
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                if failures == 1 or failures % 60 == 0:
                    log.warning("receiving from %s failed: %s; retrying", self.queue, exc)
                await asyncio.sleep(min(5.0, 0.1 * 2**failures))
                continue
            for message in messages:
                peer = self.pick()
                if peer is None or self.stopped or gw.closing:
                    gw.spawn(gw.release_message(self.queue, message))
                    continue
                peer.assigned += 1
                deadline = time.monotonic() + gw.config.ack_timeout
                gw.deliver(Delivery(self.queue, message, peer, deadline))


class Gateway:
    """The SKMQ push gateway over a `Client`. `await start()`, then `await close()`."""

    def __init__(self, client: Client, config: GatewayConfig | None = None) -> None:
        self.client = client
        self.config = config or GatewayConfig()
        self.apps: dict[str, App] = {}
        self.queues_ready: set[str] = set()
        self.dispatchers: dict[str, Dispatcher] = {}
        self.waiting: dict[str, list[Delivery]] = {}  # msgid -> deliveries awaiting answers
        self.expiring: deque[Delivery] = deque()  # the same, in deadline order
        self.connections: set[Connection] = set()
        self.tasks: set[asyncio.Task[Any]] = set()
        self.queue_ops: dict[str, QueueOps] = {}
        # SQLite takes one writer at a time: more threads would only wait on its lock
        threads = 1 if client.backend.scheme == "sqlite" else 8
        self.executor = ThreadPoolExecutor(threads, thread_name_prefix="push-store")
        self.server: asyncio.Server | None = None
        self.closing = False
        self.stats = {"received": 0, "pushed": 0, "acked": 0, "rejected": 0, "dead": 0}

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        tls = server_tls(self.config)
        self.server = await asyncio.start_server(
            self._accept,
            self.config.host,
            self.config.port,
            limit=2**20,
            backlog=1024,
            ssl=tls,
            ssl_handshake_timeout=self.config.read_timeout if tls else None,
        )
        self.spawn(self._heartbeats())
        self.spawn(self._expiry())
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
        for dispatcher in self.dispatchers.values():
            dispatcher.stop()
        pending = [d for ds in self.waiting.values() for d in ds]
        self.waiting.clear()
        for delivery in pending:
            delivery.peer.deliveries.pop(delivery.msgid, None)
        await asyncio.gather(
            *(self.release_message(d.queue, d.message) for d in pending), return_exceptions=True
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

    def ops(self, queue: str) -> QueueOps:
        ops = self.queue_ops.get(queue)
        if ops is None:
            ops = self.queue_ops[queue] = QueueOps(self, queue)
        return ops

    # -- connections ----------------------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = Connection(reader, writer)
        if len(self.connections) >= self.config.max_connections:
            conn.write(resp("error", "too many connections; try again later"))
            await conn.flush()
            conn.close()
            return
        conn.authenticated = self.config.auth_token is None
        self.connections.add(conn)
        try:
            await self._read(conn)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("push connection from %s failed", conn.address)
        finally:
            self.connections.discard(conn)
            conn.close()
            if conn.peer is not None:
                await self.drop(conn.peer, "its connection closed")

    async def _read(self, conn: Connection) -> None:
        decoder = Decoder(max_frame=self.config.max_frame)
        cfg = self.config
        while not self.closing:
            timeout = cfg.read_timeout if decoder.pending else cfg.idle_timeout
            try:
                data = await asyncio.wait_for(conn.reader.read(65536), timeout)
            except TimeoutError:
                why = "a frame stayed unfinished" if decoder.pending else "it was idle"
                log.debug("closing %s: %s for %.0f s", conn.address, why, timeout)
                return
            if not data:
                return
            conn.last_seen = time.monotonic()
            conn.pinged_at = None
            for item in decoder.feed(data):
                if isinstance(item, FrameError):
                    conn.reply(None, [resp("error", f"malformed frame: {item.reason}")])
                elif item.type in CONCURRENT and conn.authenticated:
                    conn.reply(asyncio.ensure_future(self._handled(conn, item)), None)
                else:  # state the next frames depend on: done before they are read
                    out: list[bytes] = []
                    keep = await self.handle(conn, item, out)
                    conn.reply(None, out)
                    if not keep:
                        await conn.finish()
                        return
                if conn.backlog >= MAX_PIPELINED:
                    await conn.settle(MAX_PIPELINED // 2)
            await conn.flush()
        await conn.finish()

    async def _handled(self, conn: Connection, frame: Frame) -> list[bytes]:
        out: list[bytes] = []
        try:
            await self.handle(conn, frame, out)
        except Exception:
            log.exception("push frame %s from %s failed", frame.type, conn.address)
            out.append(resp("error", "internal error (the gateway log has the details)"))
        return out

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
        if not conn.authenticated:
            out.append(resp("error", "authenticate first: send type=auth with the token"))
            return False
        try:
            if kind in SEND_TYPES:
                await self._send(conn, frame, out)
            elif kind in ANSWERS:
                await self._answer(conn, frame, out)
            else:
                out.append(
                    resp(
                        "error",
                        f"unknown type {kind[:40]!r}: send queue, topic, register, arrived, ack,"
                        " reject, error, auth or ping",
                        msgid=frame.msgid,
                    )
                )
        except ConveyorError as exc:
            out.append(resp("reject" if kind in SEND_TYPES else "error", str(exc)))
        return True

    def _auth(self, conn: Connection, token: str, out: list[bytes], *, quiet: bool = False) -> bool:
        """Check a token (in constant time); `quiet`: no reply when it is right (the
        register frame that carried it gets the one reply)."""
        expected = self.config.auth_token
        if expected is None or hmac.compare_digest(token.encode(), expected.encode()):
            conn.authenticated = True
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
        if not frame.appid:
            out.append(resp("reject", "appid is missing: it names the app to send to"))
            return
        app = self.app(frame.appid)
        wait = app.bucket.reserve(self.config.rate_wait)
        if wait is None:
            out.append(
                resp(
                    "reject",
                    f"rate limit: app {app.name} takes {self.config.rate:g} messages a second;"
                    " send more slowly or raise `rate`",
                    msgid=frame.msgid,
                )
            )
            return
        if wait > 0:
            await asyncio.sleep(wait)
        msgid = frame.msgid or None
        if frame.type == "queue":
            await self.ensure_app_queue(app)
            ops = self.ops(app.name)
            result = await ops.send(frame.content if msgid is None else (frame.content, msgid))
            duplicate = result.duplicate
        else:
            if not await self.ensure_topic(app):
                out.append(resp("reject", "this store has no topics: send type=queue"))
                return
            results = await self.call(self.client.publish, app.name, frame.content, id=msgid)
            duplicate = any(r.duplicate for r in results.values())
        self.stats["received"] += 1
        if duplicate:
            text = f"message already exists, ID: {frame.msgid}, Status: not acknowledged"
        else:
            text = "Message enqueue successful"
        out.append(resp("ack", text, msgid=frame.msgid))

    # -- consumers ------------------------------------------------------------------------

    async def _register(self, conn: Connection, frame: Frame, out: list[bytes]) -> bool:
        text = frame.content.decode("utf-8", "replace")
        try:
            info = json.loads(text)
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
            peer = self._peer(conn, info)
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
            await self.drop(old, "it registered again")
        app.peers[peer.id] = peer
        if peer.connection is not None:
            if conn.peer is not None and conn.peer is not peer:
                await self.drop(conn.peer, "its connection registered another consumer")
            conn.peer = peer
        if peer.topic_queue is not None:
            dispatcher = Dispatcher(self, peer.topic_queue, lambda: [peer] if peer.alive else [])
            self.dispatchers[peer.topic_queue] = dispatcher
            dispatcher.start()
        self._room(peer)
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

    def _peer(self, conn: Connection, info: dict[str, Any]) -> Peer:
        pid, app = info.get("id"), info.get("app_id")
        if not isinstance(pid, str) or not pid or len(pid) > 128:
            raise InvalidInput('"id" must be a string of 1-128 characters')
        if not isinstance(app, str) or not app:
            raise InvalidInput('"app_id" must name the app')
        weight = info.get("weight", 0)
        if isinstance(weight, str) and weight.strip().isdigit():
            weight = int(weight)
        if not isinstance(weight, int) or isinstance(weight, bool) or not 0 <= weight <= 10_000:
            raise InvalidInput('"weight" must be a whole number from 0 to 10000')
        prefetch = info.get("prefetch", self.config.prefetch)
        if not isinstance(prefetch, int) or not 1 <= prefetch <= 10_000:
            raise InvalidInput('"prefetch" must be a whole number from 1 to 10000')
        host = info.get("host") or ""
        port = info.get("port") or 0
        if isinstance(port, str):
            if port and not port.isdigit():
                raise InvalidInput(f'"port" {port[:10]!r} is not a port number')
            port = int(port or 0)
        if not isinstance(host, str) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise InvalidInput('"host" must be a string and "port" a port number')
        dial = bool(host and port) and info.get("mode") != "connection"
        return Peer(
            id=pid,
            app=app,
            weight=weight,
            prefetch=prefetch,
            host=host,
            port=port,
            connection=None if dial else conn,
        )

    def _room(self, peer: Peer) -> None:
        """A consumer has room again: wake the dispatchers that push to it."""
        for name in (peer.app, peer.topic_queue):
            dispatcher = self.dispatchers.get(name) if name else None
            if dispatcher is not None:
                dispatcher.room.set()

    async def drop(self, peer: Peer, why: str) -> None:
        """Remove a consumer; its unanswered messages go back to their queues now."""
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
            self._forget(delivery)
        log.info(
            "consumer %s of app %s removed: %s; %d unanswered message(s) released",
            peer.id, peer.app, why, len(pending),
        )  # fmt: skip
        await asyncio.gather(
            *(self.release_message(d.queue, d.message) for d in pending), return_exceptions=True
        )

    async def release_message(self, queue: str, message: Message) -> None:
        """Make a message received for a consumer visible again now."""
        if message.receipt is not None:
            with contextlib.suppress(ConveyorError):
                await self.ops(queue).visibility((message.receipt, 0.0))

    # -- delivery -------------------------------------------------------------------------

    def deliver(self, delivery: Delivery) -> None:
        peer = delivery.peer
        stale = peer.deliveries.pop(delivery.msgid, None)
        if stale is not None:
            self._forget(stale)
        peer.deliveries[delivery.msgid] = delivery
        self.waiting.setdefault(delivery.msgid, []).append(delivery)
        self.stats["pushed"] += 1
        frame = encode(
            Frame(type="push", appid=peer.app, msgid=delivery.msgid, content=delivery.message.body)
        )
        if peer.connection is not None:
            peer.connection.write(frame)
        else:
            self.spawn(self._dial_push(delivery, frame))
        self.expiring.append(delivery)

    async def _expiry(self) -> None:
        """Free a consumer's slot when its time to answer a message ends (the message is
        visible again then, and goes to whoever has room). Deliveries are in deadline
        order; one whose deadline `arrived` moved goes to the back."""
        while not self.closing:
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
                self._forget(delivery)
                if delivery.peer.deliveries.get(delivery.msgid) is delivery:
                    del delivery.peer.deliveries[delivery.msgid]
                self._room(delivery.peer)

    def _forget(self, delivery: Delivery) -> bool:
        found = self.waiting.get(delivery.msgid)
        if not found or delivery not in found:
            return False
        found.remove(delivery)
        if not found:
            del self.waiting[delivery.msgid]
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

    async def _answer(self, conn: Connection, frame: Frame, out: list[bytes]) -> None:
        if not frame.msgid:
            out.append(resp("error", f"{frame.type} needs the msgid it answers"))
            return
        delivery = self._find(conn, frame)
        if delivery is None:
            out.append(
                resp(
                    "error",
                    f"no message {frame.msgid[:128]!r} is awaiting an answer: it was answered,"
                    " or its ack_timeout passed and it is being delivered again",
                    msgid=frame.msgid,
                )
            )
            return
        ops = self.ops(delivery.queue)
        try:
            if frame.type == "arrived":  # held for this consumer until its ack_timeout
                out.append(resp("ack", "", msgid=frame.msgid))
                return
            self._settle(delivery)
            if frame.type == "ack":
                await ops.delete(delivery.receipt)
                self.stats["acked"] += 1
            elif frame.type == "reject" and delivery.message.receive_count <= (
                self.config.retry_times
            ):
                await ops.visibility((delivery.receipt, self.config.retry_delay))
                self.stats["rejected"] += 1
            else:
                why = "rejected" if frame.type == "reject" else "failed"
                await self._dead_letter(delivery, f"{why} by consumer {delivery.peer.id}")
                self.stats["dead"] += 1
        except ReceiptHandleInvalid:
            out.append(
                resp(
                    "error",
                    f"message {frame.msgid} is no longer held for this answer (its ack_timeout"
                    " passed, or it was removed)",
                    msgid=frame.msgid,
                )
            )
            return
        out.append(resp("ack", "", msgid=frame.msgid))

    def _settle(self, delivery: Delivery) -> None:
        """The consumer answered for good: its slot is free."""
        self._forget(delivery)
        peer = delivery.peer
        if peer.deliveries.get(delivery.msgid) is delivery:
            del peer.deliveries[delivery.msgid]
        self._room(peer)

    async def _dead_letter(self, delivery: Delivery, error: str) -> None:
        queue = self.client.queue(delivery.queue)
        info = await self.call(self.client.queue_info, delivery.queue)
        policy = info.attributes.dead_letter
        if policy is None:
            raise InvalidInput(
                f"queue {delivery.queue} has no dead-letter queue; the message stays (set one"
                " with `conveyor queue set`)"
            )
        if Capability.EDIT_IN_PLACE in self.client.capabilities:
            # in place, atomically: id, body and attributes kept, the source recorded
            try:
                await self.call(queue.move_to_dlq, delivery.msgid, error)
                return
            except NotFound as exc:
                raise ReceiptHandleInvalid(str(exc)) from exc
            except Unsupported:
                pass
        # a copy first, then the original: at worst a copy too many, never a loss
        dead = self.client.queue(policy.queue)
        await self.call(dead.send, delivery.message.body, attributes=delivery.message.attributes)
        await self.call(queue.delete, delivery.receipt)

    async def _dial_push(self, delivery: Delivery, frame: bytes) -> None:
        """SKMQ's delivery: dial the consumer, push, read its answer, reply, close."""
        peer = delivery.peer
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(peer.host, peer.port), self.config.dial_timeout
            )
        except (OSError, TimeoutError) as exc:
            await self.drop(peer, f"dialling {peer.host}:{peer.port} failed ({exc})")
            return
        conn = Connection(reader, writer)
        conn.authenticated = True
        try:
            conn.write(frame)
            await conn.flush()
            decoder = Decoder(max_frame=self.config.max_frame)
            deadline = time.monotonic() + self.config.ack_timeout
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                data = await asyncio.wait_for(reader.read(65536), left)
                if not data:
                    return
                for item in decoder.feed(data):
                    if isinstance(item, FrameError):
                        conn.write(resp("error", f"malformed frame: {item.reason}"))
                    elif item.type in ANSWERS:
                        if not item.msgid:
                            item = Frame(item.type, peer.app, delivery.msgid, item.content)
                        out: list[bytes] = []
                        await self._answer(conn, item, out)
                        conn.write(b"".join(out))
                        await conn.flush()
                        return
        except (OSError, TimeoutError):
            return  # no answer: the ack timeout delivers it again
        finally:
            conn.close()

    # -- heartbeats -----------------------------------------------------------------------

    async def _heartbeats(self) -> None:
        cfg = self.config
        while not self.closing:
            await asyncio.sleep(min(cfg.heartbeat_interval, cfg.heartbeat_timeout) / 2)
            now = time.monotonic()
            for app in list(self.apps.values()):
                for peer in list(app.peers.values()):
                    conn = peer.connection
                    if conn is None:
                        if now - peer.checked_at >= cfg.heartbeat_interval:
                            peer.checked_at = now
                            self.spawn(self._ping_dialled(peer))
                    elif conn.pinged_at is not None:
                        if now - conn.pinged_at > cfg.heartbeat_timeout:
                            conn.close()
                            await self.drop(peer, "it stopped answering pings")
                    elif now - conn.last_seen >= cfg.heartbeat_interval:
                        conn.pinged_at = now
                        conn.write(encode(PING))

    async def _ping_dialled(self, peer: Peer) -> None:
        """SKMQ's heartbeat: dial, send ping, expect pong."""
        timeout = self.config.heartbeat_timeout
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(peer.host, peer.port), timeout
            )
        except (OSError, TimeoutError) as exc:
            await self.drop(peer, f"dialling {peer.host}:{peer.port} failed ({exc})")
            return
        try:
            writer.write(encode(PING))
            await writer.drain()
            answer = await asyncio.wait_for(reader.read(10), timeout)
            if not answer.startswith(b"pong"):
                await self.drop(peer, "it did not answer ping with pong")
        except (OSError, TimeoutError):
            await self.drop(peer, "it did not answer ping")
        finally:
            writer.close()
