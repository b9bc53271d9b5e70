"""The timed runs every benchmark shares: one process, and 1 producer + 4 consumer processes."""

from __future__ import annotations

import multiprocessing as mp
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .drivers import Driver

STAMP = struct.Struct("d")


def body(size: int) -> bytes:
    return STAMP.pack(time.time()) + b"x" * (size - STAMP.size)


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))] * 1000


@dataclass
class Phase:
    msgs: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.msgs / self.seconds if self.seconds else 0.0

    def cell(self) -> str:
        return f"{self.rate:9,.0f} {pct(self.latencies, 50):7.2f} {pct(self.latencies, 99):7.2f}"


def drain_once(d: Driver, batch: int, lat: list[float]) -> int:
    t0 = time.perf_counter()
    got = d.receive(batch)
    if got:
        d.delete([h for h, _ in got])
        lat.append(time.perf_counter() - t0)
    return len(got)


def run_single(d: Driver, n: int, batch: int, size: int) -> tuple[Phase, Phase, Phase]:
    d.setup()
    send, recv, e2e = Phase(), Phase(), Phase()
    start = time.perf_counter()
    for _ in range(n // batch):
        t0 = time.perf_counter()
        d.send([body(size) for _ in range(batch)])
        send.latencies.append(time.perf_counter() - t0)
    send.seconds, send.msgs = time.perf_counter() - start, n // batch * batch
    start = time.perf_counter()
    while recv.msgs < send.msgs:
        got = drain_once(d, batch, recv.latencies)
        if not got:
            raise RuntimeError(f"{d.name}: queue empty after {recv.msgs} of {send.msgs}")
        recv.msgs += got
    recv.seconds = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(n // batch):
        d.send([body(size) for _ in range(batch)])
        got = d.receive(batch)
        now = time.time()
        e2e.latencies += [now - STAMP.unpack_from(b)[0] for _, b in got]
        d.delete([h for h, _ in got])
        e2e.msgs += len(got)
    e2e.seconds = time.perf_counter() - start
    d.close()
    return send, recv, e2e


def _producer(d: Driver, n: int, batch: int, size: int, out: mp.Queue) -> None:  # type: ignore[type-arg]
    lat = []
    start = time.perf_counter()
    for _ in range(n // batch):
        t0 = time.perf_counter()
        d.send([body(size) for _ in range(batch)])
        lat.append(time.perf_counter() - t0)
    out.put(("send", n // batch * batch, time.perf_counter() - start, lat))
    d.close()


def _consumer(d: Driver, total: int, batch: int, done, out: mp.Queue) -> None:  # type: ignore[no-untyped-def, type-arg]
    lat: list[float] = []
    e2e: list[float] = []
    count = 0
    start = time.perf_counter()
    last = start
    while done.value < total:
        t0 = time.perf_counter()
        got = d.receive(batch)
        if not got:
            time.sleep(0.001)
            continue
        now = time.time()
        e2e += [now - STAMP.unpack_from(b)[0] for _, b in got]
        d.delete([h for h, _ in got])
        last = time.perf_counter()
        lat.append(last - t0)
        count += len(got)
        with done.get_lock():
            done.value += len(got)
    out.put(("recv", count, last - start, lat, e2e))
    d.close()


def run_multi(d: Driver, n: int, batch: int, size: int) -> tuple[Phase, Phase, Phase]:
    d.setup()
    d.close()
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    done = ctx.Value("i", 0)
    start = time.perf_counter()
    procs = [
        ctx.Process(target=_consumer, args=(d, n // batch * batch, batch, done, out))
        for _ in range(4)
    ]
    procs.append(ctx.Process(target=_producer, args=(d, n, batch, size, out)))
    for p in procs:
        p.start()
    results = [out.get(timeout=600) for _ in procs]
    elapsed = time.perf_counter() - start
    for p in procs:
        p.join()
    send, recv, e2e = Phase(), Phase(), Phase()
    for r in results:
        if r[0] == "send":
            send = Phase(r[1], r[2], r[3])
        else:
            recv.msgs += r[1]
            recv.seconds = max(recv.seconds, r[2])
            recv.latencies += r[3]
            e2e.latencies += r[4]
    e2e.msgs, e2e.seconds = recv.msgs, elapsed
    return send, recv, e2e


Runner = Callable[[Driver, int, int, int], tuple[Phase, Phase, Phase]]


def alternate(
    drivers: Sequence[Driver], runner: Runner, n: int, batch: int, size: int, repeat: int
) -> list[tuple[Phase, Phase, Phase]]:
    """Run the drivers in turn, `repeat` rounds (a, b, a, b, ...); for each driver, the run
    with the median end-to-end rate. A store and its baseline so meet the same drifts in
    this machine's speed, which move a single run by 15% or more."""
    runs: list[list[tuple[Phase, Phase, Phase]]] = [[] for _ in drivers]
    for _ in range(repeat):
        for i, d in enumerate(drivers):
            runs[i].append(runner(d, n, batch, size))
    return [sorted(r, key=lambda t: t[2].rate)[len(r) // 2] for r in runs]
