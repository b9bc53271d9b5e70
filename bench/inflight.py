"""Receive cost by messages in flight on the SQL stores: ``python -m bench.inflight
[--levels 1000,10000] [--stores sqlite,postgres,mysql]``.

For each store (SQLite at durability=normal, PostgreSQL, MariaDB) one queue holds the
largest level plus 2,000 messages of 100 bytes, with a visibility timeout of an hour.
Receives of 10 (never deleted) put messages in flight up to each level in turn; at each
level, once the store has had the time it takes to find the queue deep (`settle`: a claim
1.5 s after reaching the level, then 1.5 s more), 100 more receives are timed: msgs/s and
p50/p99 of one receive. In flight at the queue's head, those messages are what a receive
must get past (consumers holding messages for long, or dead ones that never delete).
Target: at the highest level, >= 80% of the rate at the lowest.

`--fifo`: a FIFO queue per level instead, whose first `level` groups are held back (their
first message in flight, a second waiting behind it) ahead of the groups a receive can take.

`--hot` (PostgreSQL): what a deep queue's partial indexes cost the store's other queues.
Rounds of one send, receive and delete of single messages on a plain queue, each round
after a `CHECKPOINT`: WAL bytes a message and msgs/s, with no deep queue, then while another
queue is deep (600 of 1,000 messages in flight, its indexes built), then after that queue
has drained and its process has dropped them (docs/stores.md).
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
from typing import Any

from conveyor import Client, Queue, SendEntry

from .depth import BODY, STORES, drop, fill, rate

TIMED = 100  # receives timed at each level
# seconds given the store before the timed receives, twice: a slow claim looks at the queue's
# head at most once a second a queue (conveyor/backends/sql/inflight.py, LOOK_EVERY), and
# PostgreSQL builds the indexes of a queue found deep in the background
SETTLE = 1.5


def hold(q: Queue, level: int, held: int, label: str, what: str) -> int:
    """Receive (and keep) until `level` messages are held; how many are."""
    started = time.perf_counter()
    while held < level:
        held += len(q.receive(min(10, level - held)))
        print(
            f"\r  {label}: {held:,} {what} ({time.perf_counter() - started:.0f} s)",
            end="",
            file=sys.stderr,
            flush=True,
        )
    print(file=sys.stderr)
    return held


def settle(q: Queue) -> int:
    """Give the store time to find the queue deep at this level: a claim after `SETTLE`
    seconds (slow where the queue is deep and not yet read from its indexes, so it looks),
    then `SETTLE` more for what it builds. The messages that claim took (kept)."""
    time.sleep(SETTLE)
    got = len(q.receive(10))
    time.sleep(SETTLE)
    return got


def timed(q: Queue) -> tuple[int, tuple[float, float, float]]:
    """Messages got by TIMED receives of 10 (kept), and (msgs/s, p50 ms, p99 ms) of one."""
    times = []
    got = 0
    for _ in range(TIMED):
        t0 = time.perf_counter()
        got += len(q.receive(10))
        times.append(time.perf_counter() - t0)
    times.sort()
    return got, (got / sum(times), statistics.median(times) * 1e3, times[TIMED * 99 // 100] * 1e3)


def measure(url: str, levels: list[int], label: str) -> list[tuple[float, float, float]]:
    """(msgs/s, p50 ms, p99 ms) of receives of 10 at each level of messages in flight."""
    client = Client(url)
    try:
        q = client.create_queue("inflight", visibility_timeout=3600)
        fill(client, "inflight", max(levels) + TIMED * 10 * len(levels) + 2_000, label)
        held = 0
        out = []
        for level in levels:
            held = hold(q, level, held, label, "in flight")
            held += settle(q)
            got, row = timed(q)
            held += got
            out.append(row)
        return out
    finally:
        client.close()


def send_groups(q: Queue, groups: range, tag: str) -> None:
    """One message to each group, ten a batch."""
    for start in range(groups.start, groups.stop, 10):
        q.send_batch(
            [
                SendEntry(
                    entry_id=str(i), body=f"{g}-{tag}", group_id=f"g{g}", dedup_id=f"{g}-{tag}"
                )
                for i, g in enumerate(range(start, min(start + 10, groups.stop)))
            ]
        )


def measure_fifo(url: str, levels: list[int], label: str) -> list[tuple[float, float, float]]:
    """(msgs/s, p50 ms, p99 ms) of receives of 10 from a FIFO queue at each level of groups
    held back: each has its first message in flight and a second one waiting behind it,
    ahead of the groups a receive can take."""
    client = Client(url)
    out = []
    try:
        for level in levels:
            q = client.create_queue(f"held{level}.fifo", visibility_timeout=3600)
            send_groups(q, range(level), "a")
            hold(q, level, 0, label, "groups held")
            send_groups(q, range(level), "b")  # waiting behind the held ones
            send_groups(q, range(level, level + TIMED * 10 + 100), "a")
            out.append(timed(q)[1])
        return out
    finally:
        client.close()


HOT_ROUNDS = 1_000  # single-message rounds a measurement


def wal_rounds(client: Client, q: Queue, repeat: int) -> tuple[float, float]:
    """(WAL bytes a message, msgs/s) of HOT_ROUNDS rounds of send, receive and delete, each
    measurement after a CHECKPOINT; the medians of `repeat`."""
    import psycopg

    conninfo = client.backend.db.conninfo  # type: ignore[attr-defined]
    wal, rates = [], []
    with psycopg.connect(conninfo, autocommit=True) as admin:

        def lsn() -> str:
            row = admin.execute("SELECT pg_current_wal_lsn()::text").fetchone()
            assert row is not None
            return str(row[0])

        for _ in range(repeat):
            admin.execute("CHECKPOINT")
            before, started = lsn(), time.perf_counter()
            for _ in range(HOT_ROUNDS):
                q.send(BODY)
                [m] = q.receive()
                q.delete(m.receipt or "")
            seconds = time.perf_counter() - started
            row = admin.execute("SELECT pg_wal_lsn_diff(%s, %s)", (lsn(), before)).fetchone()
            assert row is not None
            wal.append(float(row[0]) / HOT_ROUNDS)
            rates.append(HOT_ROUNDS / seconds)
    return statistics.median(wal), statistics.median(rates)


def measure_hot(url: str, repeat: int) -> list[tuple[str, float, float]]:
    """(phase, WAL bytes a message, msgs/s) on a plain queue, as another queue goes deep in
    messages in flight and drains again."""
    client = Client(url)
    try:
        backend: Any = client.backend
        held = backend.dialect.held
        held.check_after, held.rows = 0.0, 500  # deep at 500 ahead (5,000 by default)
        plain = client.create_queue("plain")
        deep = client.create_queue("deep", visibility_timeout=3600)
        out = [("no deep queue", *wal_rounds(client, plain, repeat))]
        for _ in range(100):
            deep.send_batch([BODY] * 10)
        taken = [m for _ in range(60) for m in deep.receive(10)]
        held.join()
        if not held.deep:
            raise SystemExit("the deep queue did not get its indexes")
        out.append(("another queue deep", *wal_rounds(client, plain, repeat)))
        deep.delete_batch([m.receipt or "" for m in taken])
        held.recheck_every = 0.0  # look at the next claim (every 30 s by default)
        deep.receive()
        held.join()
        if held.deep:
            raise SystemExit("the drained queue kept its indexes")
        out.append(("after it drained", *wal_rounds(client, plain, repeat)))
        return out
    finally:
        client.close()


def main() -> None:
    ap = argparse.ArgumentParser(
        prog="python -m bench.inflight", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--levels", default="1000,10000")
    ap.add_argument("--stores", default="sqlite,postgres,mysql")
    ap.add_argument(
        "--fifo",
        action="store_true",
        help="a FIFO queue with groups held back (first message in flight) instead",
    )
    ap.add_argument(
        "--hot",
        action="store_true",
        help="PostgreSQL: WAL a message on a plain queue while another is deep, and after",
    )
    ap.add_argument("--repeat", type=int, default=3, help="--hot: measurements a phase")
    args = ap.parse_args()
    if args.hot:
        main_hot(args.repeat)
        return
    levels = sorted(int(x) for x in args.levels.split(","))
    print(f"# receive cost by messages in flight — {platform.platform()}, {os.cpu_count()} CPUs")
    what = "FIFO groups held back" if args.fifo else "in flight"
    print(f"# receives of 10 at {', '.join(f'{n:,}' for n in levels)} {what}; {TIMED} timed")
    results = []
    for store in args.stores.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            url = STORES[store].format(tmp=tmp, depth="f", prefix=f"fl{secrets.token_hex(3)}_")
            try:
                run = measure_fifo if args.fifo else measure
                results.append((store, run(url, levels, store)))
            finally:
                if store != "sqlite":
                    drop(url)
    print()
    held = "held" if args.fifo else "in flight"
    head = " ".join(f"{f'{n:,} {held}':>26}" for n in levels)
    print(f"{'store':9} {head}  ratio  target")
    for store, rows in results:
        cells = " ".join(f"{rate(r):>9} msgs/s {p50:5.2f}/{p99:5.2f} ms" for r, p50, p99 in rows)
        ratio = rows[-1][0] / rows[0][0]
        flag = "" if ratio >= 0.8 else "BELOW TARGET"
        print(f"{store:9} {cells}  {ratio:5.2f}  >= 0.80 {flag}")
    print("# each cell: msgs/s, then p50/p99 of one receive")


def main_hot(repeat: int) -> None:
    url = STORES["postgres"].format(tmp="", depth="", prefix=f"hot{secrets.token_hex(3)}_")
    print(f"# a deep queue's indexes and the other queues — {platform.platform()}")
    print(
        f"# PostgreSQL; {HOT_ROUNDS:,} rounds of send, receive, delete of one 100-byte message"
        f" a measurement, each after a CHECKPOINT; median of {repeat}"
    )
    try:
        rows = measure_hot(url, repeat)
    finally:
        drop(url)
    print(f"{'phase':22} {'WAL B/msg':>10} {'msgs/s':>9}")
    for phase, wal, per_second in rows:
        print(f"{phase:22} {wal:>10,.0f} {rate(per_second):>9}")


if __name__ == "__main__":
    main()
