"""The push gateway's tests' parts: a gateway on its own event loop thread, a raw SKMQ
connection, and a consumer process the tests kill or stop (``python -m tests.support.push``)."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, ClassVar
from unittest.mock import patch

from conveyor import Client
from conveyor.push import (
    Gateway,
    GatewayConfig,
    PushConsumer,
    PushMessage,
    PushProducer,
)
from conveyor.push.codec import Decoder, Frame, FrameError, encode
from conveyor.push.dispatch import QueueOps


class Running:
    """A gateway serving on its own event loop thread."""

    def __init__(self, client: Client, config: GatewayConfig) -> None:
        self.client = client
        self.loop = asyncio.new_event_loop()
        self.gateway = Gateway(client, config)
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.run(self.gateway.start())
        self.url = f"skmq://127.0.0.1:{self.gateway.port}"
        self.port = self.gateway.port
        self.producers: list[PushProducer] = []

    def producer(self, **options: Any) -> PushProducer:
        """A `PushProducer` of this gateway's, closed with it."""
        producer = PushProducer(self.url, **options)
        self.producers.append(producer)
        return producer

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    def close(self) -> None:
        for producer in self.producers:
            producer.close()
        if self.loop.is_closed():
            return
        self.run(self.gateway.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


Start = Callable[..., Running]
"""Starts a gateway: `start(store="memory://" or "sqlite", **GatewayConfig settings)`."""


class Peer:
    """A raw SKMQ connection: frames out, frames in. Those a test leaves open are closed
    after it (`close_peers`)."""

    opened: ClassVar[list[Peer]] = []

    def __init__(self, port: int, sock: socket.socket | None = None) -> None:
        self.sock = sock or socket.create_connection(("127.0.0.1", port), timeout=10)
        Peer.opened.append(self)
        self.decoder = Decoder()
        self.frames: list[Frame | FrameError] = []
        self.raw = b""

    def send(self, data: bytes | Frame) -> None:
        self.sock.sendall(encode(data) if isinstance(data, Frame) else data)

    def next(self, timeout: float = 10) -> Frame:
        deadline = time.monotonic() + timeout
        while not self.frames:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionResetError("closed")
            self.raw += data
            self.frames += self.decoder.feed(data)
        item = self.frames.pop(0)
        assert isinstance(item, Frame), item
        return item

    def resp(self) -> dict[str, str]:
        frame = self.next()
        assert frame.type == "resp", frame
        data: dict[str, str] = json.loads(frame.content)
        return data

    def closed(self, timeout: float = 10) -> bool:
        self.sock.settimeout(timeout)
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
                self.frames += self.decoder.feed(data)
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        self.sock.close()


def close_peers() -> None:
    """Close every `Peer` opened since the last call."""
    while Peer.opened:
        Peer.opened.pop().close()


def register(peer: Peer, app: str, rid: str, **extra: Any) -> dict[str, str]:
    info = {"id": rid, "app_id": app, "host": "", "port": "", "weight": 0, **extra}
    peer.send(Frame(type="register", content=json.dumps(info).encode()))
    return peer.resp()


def counting_claims(claims: list[int], *, empty: bool = False) -> AbstractContextManager[Any]:
    """`QueueOps.receive` patched to note how many messages each claim took (`empty`: the
    claims that found nothing too)."""
    receive = QueueOps.receive

    def counted(ops: QueueOps, most: int, visibility: float) -> list[Any]:
        got = receive(ops, most, visibility)
        if got or empty:
            claims.append(len(got))
        return got

    return patch.object(QueueOps, "receive", counted)


def consume_forever(url: str, app: str, out: str, seconds: str = "3600") -> None:
    """A PushConsumer whose handler takes `seconds` (a process the tests kill or stop)."""
    log = open(out, "a", buffering=1)  # noqa: SIM115 - open for the process's lifetime

    def handle(message: PushMessage) -> None:
        log.write(f"got {message.msgid}\n")
        time.sleep(float(seconds))
        log.write(f"done {message.msgid}\n")

    consumer = PushConsumer(url, app, handle, prefetch=10, workers=10)
    threading.Thread(target=lambda: consumer.registered.wait(30) and log.write("registered\n"),
                     daemon=True).start()  # fmt: skip
    consumer.run()


if __name__ == "__main__":
    consume_forever(*sys.argv[1:])
