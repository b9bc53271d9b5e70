"""Conveyor benchmark: ``python -m bench [--quick] [--stores a,b] [--depth N]``.

Prints, per store and baseline: send, receive+delete and end-to-end msgs/s with p50/p99
latency (ms per call; end to end per message), for single messages and batches of 10,
100-byte and 1 KiB bodies, in one process and with 1 producer + 4 consumer processes.
Then receive throughput at two queue depths, long-poll wake-up latency, and the target
ratios. See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import atexit
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time

from conveyor import Client
from conveyor.models import NewMessage
from conveyor.tuning import keep_heap

from .drivers import drivers
from .runs import alternate, pct, run_multi, run_single


def depth_test(workdir: str, depths: list[int], k: int, repeat: int) -> list[tuple[int, float]]:
    """Receive+delete throughput (single messages) with `depth` messages queued: each queue
    in turn, `repeat` rounds of k receives, refilled by k after each round; the median."""
    clients = []
    for depth in depths:
        client = Client(f"sqlite:///{workdir}/depth-{depth}.db?durability=normal")
        client.create_queue("deep", visibility_timeout=300)
        t0 = time.perf_counter()
        fill(client, depth, f"filling {depth:,}")
        print(f" ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
        q = client.queue("deep")
        for _ in range(50):  # warm the page cache
            [m] = q.receive(1)
            q.delete(m.receipt or "")
        clients.append(client)
    rates: list[list[float]] = [[] for _ in depths]
    for _ in range(repeat):
        for i, client in enumerate(clients):
            q = client.queue("deep")
            t0 = time.perf_counter()
            for _ in range(k):
                [m] = q.receive(1)
                q.delete(m.receipt or "")
            rates[i].append(k / (time.perf_counter() - t0))
            fill(client, k, tag=f"r{len(rates[i])}-")
    for client in clients:
        client.close()
    return [(depth, statistics.median(r)) for depth, r in zip(depths, rates, strict=True)]


def fill(client: Client, n: int, progress: str = "", tag: str = "") -> None:
    """Send n messages of 100 bytes to the queue "deep", 10,000 a transaction, with ids of
    their own (tag, then a number)."""
    filled = 0
    while filled < n:
        m = min(10_000, n - filled)
        client.backend.send(
            "deep", [NewMessage(id=f"{tag}{filled + i}", body=b"x" * 100) for i in range(m)]
        )
        filled += m
        if progress:
            print(f"\r  {progress}: {filled:,}", end="", file=sys.stderr, flush=True)


def wake_test(url: str, rounds: int) -> list[float]:
    """Same-process long poll: time from send to the waiting receiver holding the message."""
    client = Client(url)
    if "wake" not in client.list_queues():
        client.create_queue("wake")
    q = client.queue("wake")
    lat = []
    for _ in range(rounds):
        ready = threading.Event()
        got: list[float] = []

        def waiter(into: list[float] = got, flag: threading.Event = ready) -> None:
            flag.set()
            [m] = q.receive(wait=5)
            into.append(time.perf_counter())
            q.delete(m.receipt or "")

        t = threading.Thread(target=waiter)
        t.start()
        ready.wait()
        time.sleep(0.005)
        t0 = time.perf_counter()
        q.send("ping")
        t.join()
        lat.append(got[0] - t0)
    client.close()
    return lat


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer messages (a smoke run)")
    ap.add_argument("--stores", help="comma-separated driver names to run")
    ap.add_argument("--depth", type=int, default=1_000_000, help="deep queue size")
    ap.add_argument("--skip-depth", action="store_true")
    ap.add_argument("--modes", default="1 proc,1P+4C", help="comma-separated: '1 proc', '1P+4C'")
    ap.add_argument(
        "--repeat", type=int, default=3, help="rounds per row, drivers in turn; the median is shown"
    )
    ap.add_argument(
        "--default-heap",
        action="store_true",
        help="leave glibc's malloc as it is (by default the run keeps freed heap, as"
        " `conveyor serve --keep-heap` and sqlite keep_heap=true do)",
    )
    args = ap.parse_args()
    heap = "glibc defaults" if args.default_heap or not keep_heap() else "freed heap kept"
    scale = 0.2 if args.quick else 1.0
    workdir = tempfile.mkdtemp(prefix="conveyor-bench-")
    atexit.register(shutil.rmtree, workdir, True)  # the run's databases go with it
    only = set(args.stores.split(",")) if args.stores else None
    print(
        f"# Conveyor benchmark — {platform.platform()}, Python {platform.python_version()},"
        f" {os.cpu_count()} CPUs, files in {workdir}, malloc: {heap}"
    )
    print(
        "# columns: msgs/s, p50 ms, p99 ms (send and recv+del per call; e2e per message);"
        f" each row the median of {args.repeat} runs, store and baseline in turn"
    )
    header = (
        f"{'store':<24} {'mode':<8} {'batch':>5} {'body':>5} | {'send':^25} |"
        f" {'receive+delete':^25} | {'end to end':^25}"
    )
    print(header)
    print("-" * len(header))
    e2e_rates: dict[tuple[str, str, int, int], float] = {}
    for mode in args.modes.split(","):
        for batch in (1, 10):
            for size in (100, 1024):
                runner = run_single if mode == "1 proc" else run_multi
                for durability in ("memory", "full", "normal"):
                    # a store and its baseline run in turn, with the same number of messages
                    group = [
                        d
                        for d in drivers(workdir, only)
                        if durability in d.name and not (mode == "1P+4C" and d.name == "memory")
                    ]
                    if not group:
                        continue
                    full = durability == "full"
                    n = int((1500 if full else 6000) * (batch if batch > 1 else 1) ** 0.5 * scale)
                    n = max(n // batch * batch, batch * 4)
                    results = alternate(group, runner, n, batch, size, args.repeat)
                    for d, (send, recv, e2e) in zip(group, results, strict=True):
                        e2e_rates[(d.name, mode, batch, size)] = e2e.rate
                        print(
                            f"{d.name:<24} {mode:<8} {batch:>5} {size:>5} | {send.cell()} |"
                            f" {recv.cell()} | {e2e.cell()}",
                            flush=True,
                        )
    print()
    print("## SQLite store end to end, as a share of the plain-sqlite3 baseline (target >= 60%)")
    for dur in ("full", "normal"):
        for mode in ("1 proc", "1P+4C"):
            for batch in (1, 10):
                for size in (100, 1024):
                    a = e2e_rates.get((f"sqlite {dur}", mode, batch, size))
                    b = e2e_rates.get((f"sqlite3 baseline {dur}", mode, batch, size))
                    if a and b:
                        verdict = "ok" if a / b >= 0.6 else "BELOW TARGET"
                        print(
                            f"  {dur:<6} {mode:<6} batch {batch:>2} body {size:>4}:"
                            f" {a / b:6.1%}  {verdict}"
                        )
    if not args.skip_depth:
        print()
        print(
            "## Receive+delete throughput by queue depth (sqlite normal, single messages;"
            f" median of {args.repeat} rounds, the queues in turn)"
        )
        k = int(3000 * scale)
        res = depth_test(workdir, [1000 + k, args.depth], k, args.repeat)
        for depth, rate in res:
            print(f"  {depth:>9,} queued: {rate:8,.0f} msgs/s")
        ratio = res[1][1] / res[0][1]
        print(
            f"  deep / shallow: {ratio:.1%}  {'ok' if ratio >= 0.8 else 'BELOW TARGET'}"
            " (target >= 80%)"
        )
    print()
    print("## Long-poll wake-up in one process (send -> waiting receiver has it)")
    for name, url in (("memory", "memory://wake"), ("sqlite full", f"sqlite:///{workdir}/wake.db")):
        lat = wake_test(url, int(300 * scale) or 20)
        p99 = pct(lat, 99)
        print(
            f"  {name:<12} p50 {pct(lat, 50):6.2f} ms  p99 {p99:6.2f} ms"
            f"  max {max(lat) * 1000:6.2f} ms  {'ok' if p99 <= 5 else 'ABOVE TARGET'}"
            " (target p99 <= 5 ms)"
        )


if __name__ == "__main__":
    main()
