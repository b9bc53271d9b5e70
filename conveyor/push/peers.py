"""What the push gateway knows of its peers: connections (frames out, written once per turn of
the event loop), apps with their rate limits, registered consumers and the messages pushed to
them awaiting an answer."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..exceptions import InvalidInput
from ..models import Message


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
    """One TCP connection, either way: frames out, and what the gateway knows of it.

    Frames written in one turn of the event loop go out in one write: a push, a reply, a
    ping each cost a system call otherwise, and a consumer a read for each.

    A read waits until the connection's `deadline` (`read_until`): one timer a connection,
    moved on only when it goes off before the deadline it was set for, so a read that
    comes in time costs no timer and no task of its own (as `asyncio.wait_for` would)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.deadline = 0.0  # the loop's time when a read waiting for the peer gives up
        self._timer: asyncio.TimerHandle | None = None
        self._reader_task: asyncio.Task[Any] | None = None  # set while a read waits
        self._expired = False
        self.authenticated = False
        self.peer: Peer | None = None  # the consumer registered on this connection
        self.last_seen = time.monotonic()
        self.auth_deadline = self.last_seen  # when one not yet authenticated is closed
        self.pinged_at: float | None = None
        peer = writer.get_extra_info("peername")
        self.address = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self._out: list[bytes] = []  # written this turn of the loop, not yet sent

    async def read_until(self, deadline: float, size: int = 65536) -> bytes:
        """Up to `size` bytes from the peer; TimeoutError if none come by `deadline` (the
        loop's time)."""
        self.deadline = deadline
        timer = self._timer
        if timer is None or timer.when() > deadline:
            if timer is not None:
                timer.cancel()
            self._timer = asyncio.get_running_loop().call_at(deadline, self._time_up)
        task = self._reader_task = asyncio.current_task()
        try:
            return await self.reader.read(size)
        except asyncio.CancelledError:
            if not self._expired or task is None:
                raise
            self._expired = False
            task.uncancel()
            raise TimeoutError from None
        finally:
            self._reader_task = None

    def _time_up(self) -> None:
        """The timer: a read still waiting at its deadline is cancelled (and raises
        TimeoutError); one given a later deadline since is waited for again."""
        self._timer = None
        task = self._reader_task
        if task is None:
            return  # no read waits: the next one sets the timer again
        loop = task.get_loop()
        if loop.time() < self.deadline:
            self._timer = loop.call_at(self.deadline, self._time_up)
        elif not self._expired:
            self._expired = True
            task.cancel()

    def write(self, data: bytes) -> None:
        if not data or self.writer.is_closing():
            return
        if not self._out:
            asyncio.get_running_loop().call_soon(self._send_out)
        self._out.append(data)

    def _send_out(self) -> None:
        out, self._out = self._out, []
        if out and not self.writer.is_closing():
            self.writer.write(b"".join(out))

    async def flush(self) -> None:
        self._send_out()
        with contextlib.suppress(ConnectionError):
            await self.writer.drain()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._send_out()
        if not self.writer.is_closing():
            self.writer.close()


@dataclass(eq=False)
class Delivery:
    """A message pushed to a consumer and not answered yet."""

    queue: str
    message: Message
    peer: Peer
    deadline: float  # time.monotonic() when the consumer's time to answer ends
    span: Any = None  # its OpenTelemetry span, from the push to the answer (tracing.py)

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
    share_pass: float = 0.0  # its turn in the app's shares (shares.py)
    stalled: bool = False  # no room for the stall time while it was its turn (shares.py)
    alive: bool = True
    deliveries: dict[str, Delivery] = field(default_factory=dict)  # by msgid
    topic_queue: str | None = None
    checked_at: float = 0.0  # last heartbeat, dialled consumers

    @property
    def free(self) -> int:
        return self.prefetch - len(self.deliveries) if self.alive else 0

    @property
    def mode(self) -> str:
        """How it gets its pushes: "connection" (on the connection it registered on) or
        "dial" (SKMQ's: the gateway dials its host and port)."""
        return "dial" if self.connection is None else "connection"


class App:
    """An application: its queue, dead-letter queue, topic, consumers and rate limit."""

    def __init__(self, name: str, rate: float) -> None:
        self.name = name
        self.peers: dict[str, Peer] = {}
        self.bucket = TokenBucket(rate)
        self.topic_ready = False


def parse_peer(conn: Connection, info: dict[str, Any], prefetch: int) -> Peer:
    """The consumer a `register` frame's JSON describes (`prefetch`: the gateway's default
    window); InvalidInput says which field is wrong. One with a host and port is dialled
    (SKMQ's way) unless its `mode` is "connection"; others get pushes on `conn`."""
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
    prefetch = info.get("prefetch", prefetch)
    if isinstance(prefetch, bool) or not isinstance(prefetch, int) or not 1 <= prefetch <= 10_000:
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
