"""The push gateway against RabbitMQ: ``python -m bench.push [--messages N] [--quick]``.

1 producer + 4 consumer processes over TCP, single messages of 100 bytes, every message
confirmed to the producer and acknowledged by its consumer. Conveyor: `conveyor gateway`
(its own process, rate limit off) on SQLite at durability full and on memory; consumers
answer `ack` (`PushConsumer`). RabbitMQ (127.0.0.1:5672, pika): a durable queue,
persistent messages, publisher confirms on, manual acks. Both with prefetch 1 and 100, and
with the producer waiting for each confirmation (`PushProducer.send`; pika's blocking
confirms) or keeping up to 100 unconfirmed (`send_many`; pika's asynchronous confirms).
Prints msgs/s end to end (first send to last handler), p50/p99 send-to-handler latency and
the broker's CPU a message (the gateway with its fsync helper; RabbitMQ's Erlang VM),
and Conveyor on SQLite's rate and p99 against RabbitMQ's in each mode (target: a rate of at
least 1.0x, a p99 of at most 2x). See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import platform
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .procs import cpu_seconds
from .runs import pct

STAMP = struct.Struct("d")
SIZE = 100
CONSUMERS = 4
RABBIT = "amqp://guest:guest@127.0.0.1:5672/%2F"


def body() -> bytes:
    return STAMP.pack(time.time()) + b"x" * (SIZE - STAMP.size)


@dataclass
class Result:
    name: str
    msgs: int
    seconds: float
    latencies: list[float]
    sends: list[float]
    cpu: float = float("nan")  # the broker's CPU seconds over the run (its process tree)

    @property
    def rate(self) -> float:
        return self.msgs / self.seconds if self.seconds else 0.0

    def row(self) -> str:
        per = self.cpu / self.msgs * 1e6 if self.msgs else float("nan")
        return (
            f"| {self.name:<56} | {self.rate:9,.0f} | {pct(self.latencies, 50):8.2f} |"
            f" {pct(self.latencies, 99):8.2f} | {pct(self.sends, 50):7.2f} | {per:8.0f} |"
        )


def rabbit_pid() -> int | None:
    """The local RabbitMQ's Erlang VM (beam.smp), where /proc shows it."""
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc"):
            if name.isdigit():
                with contextlib.suppress(OSError), open(f"/proc/{name}/cmdline", "rb") as f:
                    cmd = f.read()
                    if b"beam.smp" in cmd and b"rabbit" in cmd:
                        return int(name)
    return None


# -- Conveyor -------------------------------------------------------------------------------


def _push_consumer(url: str, prefetch: int, count: Any, ready: Any, done: Any, out: Any) -> None:
    from conveyor.push import PushConsumer, PushMessage

    latencies: list[float] = []

    def handle(message: PushMessage) -> None:
        latencies.append(time.time() - STAMP.unpack_from(message.content)[0])
        with count.get_lock():
            count.value += 1

    consumer = PushConsumer(url, "bench", handle, prefetch=prefetch).start()
    ready.release()
    done.wait()
    consumer.stop()
    out.put(latencies)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def run_conveyor(
    store: str,
    label: str,
    n: int,
    prefetch: int,
    window: int,
    workdir: str,
    flow_backlog: int | None = None,
) -> Result:
    port = free_port()
    conf = os.path.join(workdir, "conf.json")
    settings: dict[str, Any] = {"rate": 0, "ack_timeout": 60000}
    if flow_backlog is not None:
        settings["flow_backlog"] = flow_backlog
    with open(conf, "w") as f:
        json.dump(settings, f)
    gateway = subprocess.Popen(
        [sys.executable, "-m", "conveyor", "--store", store, "gateway",
         "--listen", f"127.0.0.1:{port}", "--conf", conf],
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or gateway.poll() is not None:
                    raise RuntimeError("the gateway did not start") from None
                time.sleep(0.05)
        url = f"skmq://127.0.0.1:{port}"
        return _measure(
            label,
            n,
            lambda *a: mp.Process(target=_push_consumer, args=(url, prefetch, *a)),
            lambda: _push_producer(url, window),
            server=gateway.pid,
        )
    finally:
        gateway.terminate()
        gateway.wait(30)


def _push_producer(url: str, window: int) -> Produce:
    from conveyor.push import PushProducer

    producer = PushProducer(url)
    if window > 1:

        def stream(n: int) -> list[float]:
            replies = producer.send_many("bench", (body() for _ in range(n)), window=window)
            assert all(r.ok for r in replies)
            return []

        return stream
    return lambda n: timed(n, lambda: producer.send("bench", body()))


# -- RabbitMQ -------------------------------------------------------------------------------


def _rabbit_consumer(prefetch: int, count: Any, ready: Any, done: Any, out: Any) -> None:
    import pika

    latencies: list[float] = []
    conn = pika.BlockingConnection(pika.URLParameters(RABBIT))
    channel = conn.channel()
    channel.basic_qos(prefetch_count=prefetch)

    def handle(ch: Any, method: Any, properties: Any, content: bytes) -> None:
        latencies.append(time.time() - STAMP.unpack_from(content)[0])
        with count.get_lock():
            count.value += 1
        ch.basic_ack(delivery_tag=method.delivery_tag)

    channel.basic_consume("bench_push", handle, auto_ack=False)
    ready.release()
    while not done.is_set():
        conn.process_data_events(time_limit=0.05)
    conn.close()
    out.put(latencies)


def _rabbit_producer(window: int) -> Produce:
    import pika

    if window > 1:
        return lambda n: _rabbit_stream(n, window)
    conn = pika.BlockingConnection(pika.URLParameters(RABBIT))
    channel = conn.channel()
    channel.confirm_delivery()
    props = pika.BasicProperties(delivery_mode=2)

    def send() -> None:
        channel.basic_publish("", "bench_push", body(), properties=props, mandatory=True)

    return lambda n: timed(n, send)


def _rabbit_stream(n: int, window: int) -> list[float]:
    """Publisher confirms handled asynchronously (pika's SelectConnection): up to `window`
    messages unconfirmed at a time, as `PushProducer.send_many`."""
    import pika

    props = pika.BasicProperties(delivery_mode=2)
    pending: set[int] = set()
    state: dict[str, Any] = {"sent": 0, "channel": None}

    def pump() -> None:
        channel = state["channel"]
        while state["sent"] < n and len(pending) < window:
            state["sent"] += 1
            pending.add(state["sent"])
            channel.basic_publish("", "bench_push", body(), properties=props)
        if state["sent"] >= n and not pending:
            conn.close()

    def on_confirm(frame: Any) -> None:
        tag, multiple = frame.method.delivery_tag, frame.method.multiple
        if multiple:
            pending.difference_update([t for t in pending if t <= tag])
        else:
            pending.discard(tag)
        pump()

    def on_channel(channel: Any) -> None:
        state["channel"] = channel
        channel.confirm_delivery(on_confirm)
        pump()

    conn = pika.SelectConnection(
        pika.URLParameters(RABBIT),
        on_open_callback=lambda c: c.channel(on_open_callback=on_channel),
        on_close_callback=lambda c, reason: c.ioloop.stop(),
    )
    conn.ioloop.start()
    return []


def run_rabbit(n: int, prefetch: int, window: int) -> Result:
    import pika

    conn = pika.BlockingConnection(pika.URLParameters(RABBIT))
    channel = conn.channel()
    channel.queue_declare("bench_push", durable=True)
    channel.queue_purge("bench_push")
    conn.close()
    try:
        return _measure(
            f"RabbitMQ, {mode(window)}, prefetch {prefetch}",
            n,
            lambda *a: mp.Process(target=_rabbit_consumer, args=(prefetch, *a)),
            lambda: _rabbit_producer(window),
            server=rabbit_pid(),
        )
    finally:
        conn = pika.BlockingConnection(pika.URLParameters(RABBIT))
        conn.channel().queue_delete("bench_push")
        conn.close()


# -- the run --------------------------------------------------------------------------------


Produce = Callable[[int], list[float]]  # sends n messages; per-send latencies when waited


def mode(window: int) -> str:
    return "confirm each" if window == 1 else f"confirms streamed ({window})"


def timed(n: int, send: Callable[[], None]) -> list[float]:
    sends = []
    for _ in range(n):
        t0 = time.perf_counter()
        send()
        sends.append(time.perf_counter() - t0)
    return sends


def _measure(
    name: str,
    n: int,
    consumer: Callable[..., mp.Process],
    producer: Callable[[], Produce],
    server: int | None = None,
) -> Result:
    """Run the consumers and the producer; `server`: the broker's pid, whose CPU (with its
    children's) over the run is measured."""
    count = mp.Value("q", 0)
    ready, done, out = mp.Semaphore(0), mp.Event(), mp.Queue()
    procs = [consumer(count, ready, done, out) for _ in range(CONSUMERS)]
    for p in procs:
        p.start()
    for _ in procs:
        if not ready.acquire(timeout=60):
            raise RuntimeError(f"{name}: a consumer did not start")
    produce = producer()
    cpu = cpu_seconds(server) if server is not None else float("nan")
    start = time.perf_counter()
    sends = produce(n)
    deadline = time.monotonic() + 120
    while count.value < n and time.monotonic() < deadline:
        time.sleep(0.002)
    seconds = time.perf_counter() - start
    if server is not None:
        cpu = cpu_seconds(server) - cpu
    handled = count.value
    done.set()
    latencies: list[float] = []
    for _ in procs:
        latencies += out.get(timeout=60)
    for p in procs:
        p.join(30)
    return Result(name, handled, seconds, latencies, sends, cpu)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.push", description=__doc__)
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--quick", action="store_true", help="1,000 messages")
    parser.add_argument(
        "--repeat", type=int, default=1, help="runs of each; the median (by msgs/s) is shown"
    )
    parser.add_argument(
        "--flow-backlog",
        type=int,
        default=None,
        help="the gateway's flow_backlog (default: its own; 0: flow control off)",
    )
    args = parser.parse_args(argv)
    n = 1000 if args.quick else args.messages
    mp.set_start_method("spawn")
    workdir = tempfile.mkdtemp(prefix="conveyor-bench-push-")
    print(f"# python -m bench.push: {n:,} messages of {SIZE} bytes, 1 producer +"
          f" {CONSUMERS} consumers")  # fmt: skip
    flow = "the gateway's default" if args.flow_backlog is None else args.flow_backlog
    print(f"# {platform.python_implementation()} {platform.python_version()},"
          f" {os.cpu_count()} cores, {platform.machine()}; load average"
          f" {os.getloadavg()[0]:.2f}; flow_backlog: {flow}\n")  # fmt: skip
    print(f"| {'run (1P+4C, single messages)':<56} |    msgs/s |   p50 ms |   p99 ms | send p50 |"
          " srv µs/m |")  # fmt: skip
    print(f"|{'-' * 58}|-----------|----------|----------|----------|----------|")
    results: dict[str, Result] = {}
    try:
        for window in (1, 100):
            for prefetch in (1, 100):
                runs: list[tuple[str, Callable[[], Result]]] = []
                for store, label in (("sqlite", "SQLite full"), ("memory", "memory")):
                    db = os.path.join(workdir, f"{store}-{window}-{prefetch}.db")
                    url = f"sqlite:///{db}" if store == "sqlite" else "memory://"
                    name = f"Conveyor {label}, {mode(window)}, prefetch {prefetch}"
                    runs.append((f"{store} {window} {prefetch}", lambda u=url, m=name, p=prefetch,
                                 w=window: run_conveyor(u, m, n, p, w, workdir,
                                                        args.flow_backlog)))  # fmt: skip
                runs.append((f"rabbit {window} {prefetch}",
                             lambda p=prefetch, w=window: run_rabbit(n, p, w)))  # fmt: skip
                for key, run in runs:
                    rounds = sorted((run() for _ in range(args.repeat)), key=lambda r: r.rate)
                    results[key] = rounds[len(rounds) // 2]
                    print(results[key].row(), flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print()
    for window in (1, 100):
        for prefetch in (1, 100):
            sqlite = results[f"sqlite {window} {prefetch}"]
            rabbit = results[f"rabbit {window} {prefetch}"]
            best_rabbit = max(results[f"rabbit {w} {prefetch}"].rate for w in (1, 100))
            rate = sqlite.rate / rabbit.rate
            p99 = pct(sqlite.latencies, 99) / max(pct(rabbit.latencies, 99), 1e-9)
            met = "met" if rate >= 1.0 and p99 <= 2.0 else "NOT MET"
            print(
                f"{mode(window)}, prefetch {prefetch}: Conveyor on SQLite (full) / RabbitMQ"
                f" same mode {rate:.2f}x, / RabbitMQ confirm each"
                f" {sqlite.rate / results[f'rabbit 1 {prefetch}'].rate:.2f}x,"
                f" / RabbitMQ's best {sqlite.rate / best_rabbit:.2f}x;"
                f" p99 {p99:.2f}x RabbitMQ's (target: rate >= 1.0x, p99 <= 2x: {met})"
            )


if __name__ == "__main__":
    main()
