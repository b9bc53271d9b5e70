"""SKMQ's document (../shared/seeds: "SIKONG-MQ"), spoken over plain sockets by consumers
written from it: weights under a backlog and under a steady stream, a slow consumer held to
its window, both delivery modes, and the consumers in the registry while they are there."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from conveyor import Client
from conveyor.push import GatewayConfig

from .support.live import LiveServer
from .support.push import Running
from .support.waiting import until

WEIGHTS = {"w1": 1, "w2": 2, "w5": 5}


def frame(**fields: str) -> bytes:
    """A frame as the document writes it: key=value lines, each ended by CRLF, then CRLF."""
    return b"".join(f"{k}={v}\r\n".encode() for k, v in fields.items()) + b"\r\n"


def parse(block: bytes) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in block.split(b"\r\n"):
        key, sep, value = line.partition(b"=")
        if sep:
            out[key.decode()] = value.decode("utf-8", "replace")
        elif line.strip():
            out["type"] = line.decode()  # a bare pong
    return out


class Frames:
    """Frames read off a socket (the document's framing: a block ends at CRLF CRLF)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""

    def read(self) -> list[dict[str, str]]:
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("closed")
        self.buffer += data
        *blocks, self.buffer = self.buffer.split(b"\r\n\r\n")
        return [parse(b) for b in blocks if b.strip()]


def register(sock: socket.socket, rid: str, app: str, weight: int, **extra: Any) -> None:
    info = {"id": rid, "app_id": app, "host": "", "port": "", "weight": weight, **extra}
    sock.sendall(frame(type="register", content=json.dumps(info)))


class Consumer(threading.Thread):
    """A consumer on its own connection that answers each push `arrived`, then `ack` (after
    `pause` seconds), and each `ping` with `pong`, as the document asks; it notes how many
    it holds unanswered."""

    def __init__(self, port: int, app: str, rid: str, weight: int, **options: Any) -> None:
        super().__init__(daemon=True)
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.rid, self.pause = rid, float(options.pop("pause", 0.0))
        self.answer = bool(options.pop("answer", True))
        register(self.sock, rid, app, weight, **options)
        frames = Frames(self.sock)
        answer: list[dict[str, str]] = []
        while not answer:
            answer = frames.read()
        assert json.loads(answer[0]["content"])["status"] == "ack", answer
        self.frames = frames
        self.early = answer[1:]  # pushes that came in the same read as the answer
        self.got: list[str] = []
        self.holding = 0
        self.most_held = 0
        self.stopped = threading.Event()

    def run(self) -> None:
        try:
            while not self.stopped.is_set():
                out = []
                got, self.early = self.early or self.frames.read(), []
                pushes = [f for f in got if f.get("type") == "push"]
                out += [frame(type="pong") for f in got if f.get("type") == "ping"]
                for push in pushes:
                    self.got.append(push["msgid"])
                    self.holding += 1
                    self.most_held = max(self.most_held, self.holding)
                    out.append(frame(msgid=push["msgid"], type="arrived"))
                if self.pause:
                    time.sleep(self.pause * len(pushes))
                if self.answer:
                    out += [frame(msgid=p["msgid"], type="ack") for p in pushes]
                    self.holding -= len(pushes)
                if out:
                    self.sock.sendall(b"".join(out))
        except (OSError, ConnectionError):
            pass

    def stop(self) -> None:
        self.stopped.set()
        self.sock.close()


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Running]:
    client = Client(f"sqlite:///{tmp_path}/skmq.db")
    running = Running(client, replace(GatewayConfig(port=0), rate=0))
    yield running
    running.close()
    client.close()


def produce(port: int, app: str, n: int, *, per_second: float | None = None) -> None:
    """A producer writing `queue` frames (pipelined) and reading every `resp`."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        frames = Frames(sock)
        answered = 0
        chunk = 100 if per_second is None else max(1, int(per_second / 50))
        for start in range(0, n, chunk):
            sock.sendall(
                b"".join(
                    frame(type="queue", appid=app, msgid=f"m{i}", content=f"job {i}")
                    for i in range(start, min(n, start + chunk))
                )
            )
            if per_second is not None:
                time.sleep(chunk / per_second)
            while answered < min(n, start + chunk) - 2 * chunk:  # a window of two chunks
                answered += len(frames.read())
        while answered < n:
            got = frames.read()
            assert all(json.loads(f["content"])["status"] == "ack" for f in got), got
            answered += len(got)


def shares_of(consumers: list[Consumer]) -> dict[str, int]:
    return {c.rid: len(c.got) for c in consumers}


def assert_weighted(counts: dict[str, int], n: int) -> None:
    total = sum(WEIGHTS.values())
    for rid, weight in WEIGHTS.items():
        expected = n * weight / total
        assert abs(counts[rid] - expected) <= 0.05 * expected, (counts, rid, expected)


def test_weights_with_a_backlog(gateway: Running) -> None:
    """10,000 messages queued before the consumers connect: each gets its weight's share
    (consumers answering as fast as they can)."""
    n = 10_000
    produce(gateway.port, "backlog", n)
    assert gateway.client.queue("backlog").stats().ready == n
    consumers = [Consumer(gateway.port, "backlog", rid, w) for rid, w in WEIGHTS.items()]
    for c in consumers:
        c.start()
    until(lambda: gateway.client.queue("backlog").stats().deleted == n, timeout=120)
    for c in consumers:
        c.stop()
    counts = shares_of(consumers)
    assert sum(counts.values()) == n and len({m for c in consumers for m in c.got}) == n
    assert_weighted(counts, n)


def test_weights_with_a_steady_stream(gateway: Running) -> None:
    n = 10_000
    consumers = [Consumer(gateway.port, "stream", rid, w) for rid, w in WEIGHTS.items()]
    for c in consumers:
        c.start()
    produce(gateway.port, "stream", n, per_second=4000)
    until(lambda: gateway.client.queue("stream").stats().deleted == n, timeout=120)
    for c in consumers:
        c.stop()
    assert_weighted(shares_of(consumers), n)


def test_a_slow_consumer_is_held_to_its_window(gateway: Running) -> None:
    """A consumer that answers slowly is never given more than it has answered plus its
    window (`prefetch`); the shares still follow the weights."""
    n = 200
    produce(gateway.port, "mixed", n)
    slow = Consumer(gateway.port, "mixed", "slow", 1, prefetch=4, pause=0.02)
    fast = Consumer(gateway.port, "mixed", "fast", 1, prefetch=4)
    slow.start()
    fast.start()
    until(lambda: gateway.client.queue("mixed").stats().deleted == n, timeout=120)
    slow.stop()
    fast.stop()
    assert slow.most_held <= 4 and fast.most_held <= 4
    assert len(slow.got) + len(fast.got) == n
    assert abs(len(slow.got) - n / 2) <= 0.05 * n / 2, (len(slow.got), len(fast.got))


def test_a_consumer_that_stops_answering_is_passed_over(gateway: Running) -> None:
    """One that holds its window and answers nothing does not hold up the others for more
    than the stall time: they take the rest (its window comes back after ack_timeout)."""
    n = 500
    produce(gateway.port, "hung", n)
    hung = Consumer(gateway.port, "hung", "hung", 5, prefetch=4, answer=False)
    fast = Consumer(gateway.port, "hung", "fast", 1, prefetch=4)
    hung.start()
    fast.start()
    until(lambda: gateway.client.queue("hung").stats().deleted == n - 4, timeout=60)
    hung.stop()
    fast.stop()
    assert (len(hung.got), len(fast.got)) == (4, n - 4)


def test_weights_when_the_gateway_dials(gateway: Running) -> None:
    """SKMQ's own mode: consumers listen, the gateway dials one for each push; shares as
    with a backlog on the consumers' connections."""
    n = 1600
    produce(gateway.port, "dialled", n)
    counts: Counter[str] = Counter()
    lock = threading.Lock()
    servers: list[socket.socket] = []
    stop = threading.Event()

    def listen(rid: str, server: socket.socket) -> None:
        server.settimeout(0.5)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                frames = Frames(conn)
                got = frames.read()
                for push in got:
                    if push.get("type") == "ping":
                        conn.sendall(b"pong\r\n\r\n")
                        continue
                    with lock:
                        counts[rid] += 1
                    conn.sendall(
                        frame(msgid=push["msgid"], type="arrived")
                        + frame(msgid=push["msgid"], type="ack")
                    )
                    try:
                        while True:  # the gateway answers both, then closes
                            frames.read()
                    except (OSError, ConnectionError):
                        pass

    threads = []
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=30) as admin:
        for rid, weight in WEIGHTS.items():
            server = socket.create_server(("127.0.0.1", 0))
            servers.append(server)
            t = threading.Thread(target=listen, args=(rid, server), daemon=True)
            t.start()
            threads.append(t)
            info = {"id": rid, "app_id": "dialled", "host": "127.0.0.1",
                    "port": str(server.getsockname()[1]), "weight": weight}  # fmt: skip
            admin.sendall(frame(type="register", content=json.dumps(info)))
        frames = Frames(admin)
        answers: list[dict[str, str]] = []
        while len(answers) < 3:
            answers += frames.read()
    until(lambda: gateway.client.queue("dialled").stats().deleted == n, timeout=180)
    stop.set()
    for t in threads:
        t.join(5)
    for server in servers:
        server.close()
    assert_weighted(dict(counts), n)


def test_consumers_are_in_the_registry_while_they_are_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Consumers registered over TCP are listed by GET /consumers, `conveyor consumers` and
    the dashboard, with their app, mode, weight, messages in flight and last heartbeat; they
    go when they leave, and so does the queue of their topic copies."""
    from click.testing import CliRunner

    from conveyor.cli import cli, render

    monkeypatch.setattr(render.console, "width", 200)

    url = f"sqlite:///{tmp_path}/registry.db"
    client = Client(url)
    config = replace(GatewayConfig(port=0), heartbeat_interval=1.0, heartbeat_timeout=1.0)
    running = Running(client, config)
    try:
        with LiveServer(client) as live, httpx.Client(base_url=live.url) as http:
            # c-1 answers its pings but never acks, so what it is pushed stays in flight
            on_conn = Consumer(running.port, "billing", "c-1", 3, answer=False)
            on_conn.start()
            listener = socket.create_server(("127.0.0.1", 0))
            listener.settimeout(0.2)
            answering = threading.Event()
            answering.set()

            def pong() -> None:  # d-1 answers its pings until the end of the test
                while answering.is_set():
                    try:
                        conn, _ = listener.accept()
                    except TimeoutError:
                        continue
                    except OSError:
                        return
                    with conn:
                        conn.settimeout(5)
                        if conn.recv(64).startswith(b"ping"):
                            conn.sendall(b"pong\r\n\r\n")

            threading.Thread(target=pong, daemon=True).start()
            with socket.create_connection(("127.0.0.1", running.port), timeout=10) as admin:
                info = {"id": "d-1", "app_id": "billing", "host": "127.0.0.1",
                        "port": str(listener.getsockname()[1]), "weight": 1}  # fmt: skip
                admin.sendall(frame(type="register", content=json.dumps(info)))
                Frames(admin).read()

            def listed() -> dict[str, Any]:
                consumers = http.get("/consumers").json()["consumers"]
                return {c["id"]: c for c in consumers}

            until(lambda: len(listed()) == 2, what="both in the registry")
            found = listed()
            c1 = found["skmq:billing:c-1"]
            assert c1["queue"] == "billing" and c1["info"]["mode"] == "connection"
            assert c1["info"]["weight"] == 3 and c1["info"]["in_flight"] == 0
            assert c1["heartbeat_at"] > 0
            d1 = found["skmq:billing:d-1"]
            assert d1["info"]["mode"] == "dial" and d1["info"]["weight"] == 1
            # a message held by c-1 (it never acks) shows as in flight
            produce(running.port, "billing", 1)
            until(lambda: len(on_conn.got) == 1, what="the push to c-1")
            until(
                lambda: listed()["skmq:billing:c-1"]["info"]["in_flight"] == 1,
                what="the count refreshed",
            )
            shown = CliRunner().invoke(cli, ["--store", url, "-o", "json", "consumers"]).output
            listed_by_cli = {c["id"]: c for c in json.loads(shown)["consumers"]}
            assert listed_by_cli["skmq:billing:c-1"]["info"]["mode"] == "connection"
            table = (
                CliRunner(env={"COLUMNS": "240"}).invoke(cli, ["--store", url, "consumers"]).output
            )
            assert "push gateway" in table and "connection" in table and "dial" in table, table
            topic_queue = "billing-to-c-1"
            assert topic_queue in client.list_queues()
            # c-1 leaves: out of the registry, its topic queue gone; d-1 stops answering
            # its pings and is dropped
            on_conn.stop()
            answering.clear()
            listener.close()
            until(lambda: not listed(), timeout=30, what="both gone from the registry")
            until(lambda: topic_queue not in client.list_queues(), what="the topic queue")
            assert "billing-to-d-1" not in client.list_queues()
            assert "billing" in client.list_queues()  # the app's queue holds messages
    finally:
        running.close()
        client.close()


def test_an_unregister_frame_leaves_at_once(gateway: Running) -> None:
    c = Consumer(gateway.port, "bye", "c-9", 1)
    assert "bye-to-c-9" in gateway.client.list_queues()
    c.sock.sendall(frame(type="unregister"))
    [answer] = c.frames.read()
    assert json.loads(answer["content"]) == {
        "status": "ack",
        "content": "Recipient unregister successful.",
    }
    until(lambda: "bye-to-c-9" not in gateway.client.list_queues(), what="its topic queue")
    assert not gateway.gateway.apps["bye"].peers
    c.stop()
