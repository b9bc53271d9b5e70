"""Receive cost by messages in flight on the SQL stores: ``python -m bench.inflight
[--levels 1000,10000] [--stores sqlite,postgres,mysql]``.

For each store (SQLite at durability=normal, PostgreSQL, MariaDB) one queue holds the
largest level plus 2,000 messages of 100 bytes, with a visibility timeout of an hour.
Receives of 10 (never deleted) put messages in flight up to each level in turn; at each
level 100 more receives are timed: msgs/s and p50/p99 of one receive. In flight at the
queue's head, those messages are what a receive must get past (consumers holding messages
for long, or dead ones that never delete). Target: at the highest level, >= 80% of the
rate at the lowest.

`--fifo`: a FIFO queue per level instead, whose first `level` groups are held back (their
first message in flight, a second waiting behind it) ahead of the groups a receive can take.
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

from conveyor import Client, Queue, SendEntry

from .depth import STORES, drop, fill, rate

TIMED = 100  # receives timed at each level


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
    args = ap.parse_args()
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


if __name__ == "__main__":
    main()
