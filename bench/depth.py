"""Cost by queue depth on the SQL stores: ``python -m bench.depth [--depth N] [--stores ...]``.

For each store (SQLite at durability=normal, PostgreSQL, MariaDB) a queue holds `--shallow`
(default 1,000) messages and another `--depth` (default 1,000,000) of 100 bytes each.
Measured in rounds, the queues in turn, the median shown: an SDK drain (receive 10 +
delete_batch, refilled after each round), paging with `peek` (pages of 100 from the head,
`after` the last sequence), and `stats` (called back to back for 15 s, as a poller would on
average: a deep queue is counted now and then and its stats estimated in between, see
conveyor/backends/sql/estimates.py; p50, p99 and the slowest of its calls, a count, are
printed too). After the rounds, a new client of the store (as another process would) calls
`stats` on each queue once, within the minute in which the first client counted it: that
call's time is printed as well. Target: at depth, each at >= 80% of its rate at the
shallow depth.
"""

from __future__ import annotations

import argparse
import os
import platform
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

from conveyor import Client
from conveyor.models import NewMessage

from .runs import pct

BODY = b"x" * 100
STORES = {
    "sqlite": "sqlite:///{tmp}/depth-{depth}.db?durability=normal",
    "postgres": "postgresql://postgres@127.0.0.1:5432/test?prefix={prefix}",
    "mysql": "mysql://root@127.0.0.1:3306/test?prefix={prefix}",
}


def fill(client: Client, queue: str, n: int, progress: str = "") -> None:
    """Send n bare messages, 5,000 a transaction (ids made by the store)."""
    done = 0
    started = time.perf_counter()
    while done < n:
        m = min(5_000, n - done)
        client.backend.send(queue, [NewMessage(id="", body=BODY, generated_id=True)] * m)
        done += m
        if progress:
            rate = done / (time.perf_counter() - started)
            print(f"\r  {progress}: {done:,} ({rate:,.0f}/s)", end="", file=sys.stderr, flush=True)
    if progress:
        print(file=sys.stderr)


def drain_round(client: Client, queue: str, calls: int) -> float:
    """msgs/s of `calls` receive(10) + delete_batch."""
    q = client.queue(queue)
    got = 0
    t0 = time.perf_counter()
    for _ in range(calls):
        batch = q.receive(10)
        if batch:
            q.delete_batch([m.receipt or "" for m in batch])
        got += len(batch)
    secs = time.perf_counter() - t0
    fill(client, queue, got)
    return got / secs


def peek_round(client: Client, queue: str, pages: int) -> float:
    """Messages/s paging from the head, 100 a page."""
    q = client.queue(queue)
    after, seen = 0, 0
    t0 = time.perf_counter()
    for _ in range(pages):
        page = q.peek(100, after=after)
        if not page:
            break
        seen += len(page)
        after = page[-1].sequence or 0
    return seen / (time.perf_counter() - t0)


STATS_CALLS: dict[str, list[float]] = {}  # queue: seconds of each stats call of a store's rounds
FIRST_CALLS: dict[str, float] = {}  # queue: seconds of a new client's first stats call


def stats_round(client: Client, queue: str, seconds: int) -> float:
    """Calls/s of stats called back to back for `seconds`: the average a poller sees, counts
    of the queue (estimates.py) included."""
    q = client.queue(queue)
    took = STATS_CALLS.setdefault(queue, [])
    calls = 0
    t0 = end = time.perf_counter()
    while end - t0 < seconds:
        q.stats()
        calls += 1
        last, end = end, time.perf_counter()
        took.append(end - last)
    return calls / (end - t0)


ROUNDS: dict[str, tuple[Callable[[Client, str, int], float], int, str]] = {
    "drain (receive 10 + delete)": (drain_round, 50, "msgs/s"),
    "peek (pages of 100)": (peek_round, 50, "msgs/s"),
    "stats (polled 15 s)": (stats_round, 15, "calls/s"),
}


def measure(url: str, depths: list[int], repeat: int) -> dict[str, list[float]]:
    client = Client(url)
    try:
        names = []
        for depth in depths:
            name = f"depth-{depth}"
            client.create_queue(name, visibility_timeout=600)
            fill(client, name, depth, f"{url.split(':')[0]} {depth:,}")
            names.append(name)
        for name in names:  # warm caches
            drain_round(client, name, 20)
        rates: dict[str, list[list[float]]] = {k: [[] for _ in depths] for k in ROUNDS}
        for _ in range(repeat):
            for what, (fn, n, _) in ROUNDS.items():
                for i, name in enumerate(names):
                    rates[what][i].append(fn(client, name, n))
        for name in names:
            with Client(url) as other:
                started = time.perf_counter()
                other.queue(name).stats()
                FIRST_CALLS[name] = time.perf_counter() - started
        return {what: [statistics.median(r) for r in per] for what, per in rates.items()}
    finally:
        client.close()


def drop(url: str) -> None:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from tests.support.sqlstores import drop as drop_store

    drop_store(url)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.depth", description=__doc__.split("\n")[0])
    ap.add_argument("--depth", type=int, default=1_000_000)
    ap.add_argument("--stores", default="sqlite,postgres,mysql")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--shallow", type=int, default=1_000, help="the shallow queue's depth")
    args = ap.parse_args()
    depths = [args.shallow, args.depth]
    print(f"# cost by queue depth — {platform.platform()}, {os.cpu_count()} CPUs")
    print(
        f"# {len(ROUNDS)} operations at {depths[0]:,} and {depths[1]:,} queued; median of "
        f"{args.repeat} rounds, the queues in turn"
    )
    results: list[tuple[str, str, list[float], str]] = []
    calls: list[tuple[str, list[list[float]]]] = []
    firsts: list[tuple[str, list[float]]] = []
    for store in args.stores.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            prefix = f"depth{secrets.token_hex(3)}_"
            url = STORES[store].format(tmp=tmp, depth="q", prefix=prefix)
            STATS_CALLS.clear()
            FIRST_CALLS.clear()
            try:
                got = measure(url, depths, args.repeat)
            finally:
                if store != "sqlite":
                    drop(url)
            for what, values in got.items():
                results.append((store, what, values, ROUNDS[what][2]))
            calls.append((store, [STATS_CALLS.get(f"depth-{d}", [0.0]) for d in depths]))
            firsts.append((store, [FIRST_CALLS.get(f"depth-{d}", 0.0) for d in depths]))
    print()
    print(f"{'store':9} {'operation':29} {depths[0]:>12,} {depths[1]:>12,}  ratio  target")
    for store, what, (shallow, deep), unit in results:
        ratio = deep / shallow
        flag = "" if ratio >= 0.8 else "BELOW TARGET"
        print(
            f"{store:9} {what:29} {rate(shallow):>12} {rate(deep):>12}  {ratio:5.2f}  >= 0.80 "
            f"{unit} {flag}"
        )
    print()
    head = " ".join(f"{f'{d:,} queued':>26}" for d in depths)
    print(f"{'store':9} {'stats call ms: p50/p99/max':29} {head}")
    for store, per_depth in calls:
        cells = " ".join(
            f"{pct(t, 50):8.3f} {pct(t, 99):8.3f} {max(t) * 1e3:8.1f}" for t in per_depth
        )
        print(f"{store:9} {'':29} {cells}")
    print("# stats calls back to back, every round's; the slowest is a count (the first call's)")
    print()
    head = " ".join(f"{f'{d:,} queued':>12}" for d in depths)
    print(f"{'store':9} {'first stats of a new client ms':30} {head}")
    for store, took in firsts:
        print(f"{store:9} {'':30} " + " ".join(f"{t * 1e3:12.3f}" for t in took))


def rate(value: float) -> str:
    """A rate with the digits that matter: a decimal below 100 a second."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


if __name__ == "__main__":
    main()
